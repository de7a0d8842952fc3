"""Plan: how one replica uses its GPUs, and how many replicas share a node; the plan-string grammar.

Grammar: tokens joined by '-' in any order: tp8, u4 (Ulysses), r2 (ring), cfg2, hsdp8 (shard size),
vae2 (VAE patch parallel), fp8, an attention backend (fa, cudnn or fi; none: the platform's default),
or 1gpu for none; an optional 'Nx' prefix gives replicas per node (8x1gpu, 2xtp4). Plans always print
in the order tp, cfg, u, r, hsdp, vae, fp8, backend.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, PlainValidator, WithJsonSchema

from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.vllm_omni import PINNED, Release

_TOKEN = re.compile(r"^(tp|cfg|u|r|hsdp|vae)(\d+)$")
_FIELD = {"tp": "tp", "cfg": "cfg", "u": "ulysses", "r": "ring", "hsdp": "hsdp", "vae": "vae"}
PLAN_GRAMMAR = "tokens tpN, cfgN, uN, rN, hsdpN, vaeN, fp8, fa|cudnn|fi or 1gpu joined by '-', optional 'Nx' prefix"
AttnBackend = Literal["auto", "fa", "cudnn", "fi"]
# --diffusion-attention-backend values (vLLM-Omni 0.30 DiffusionAttentionBackendEnum) of the backend tokens
ATTN_BACKENDS: dict[str, str] = {"fa": "FLASH_ATTN", "cudnn": "CUDNN_ATTN", "fi": "FLASHINFER_ATTN"}


class Plan(BaseModel):
    """Parallel layout of one vLLM-Omni server, and how many such servers share one node."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    replicas: int = Field(default=1, ge=1, description="independent servers on disjoint GPU slices of one node")
    tp: int = Field(default=1, ge=1, description="--tensor-parallel-size")
    cfg: int = Field(default=1, ge=1, description="--cfg-parallel-size")
    ulysses: int = Field(default=1, ge=1, description="--ulysses-degree")
    ring: int = Field(default=1, ge=1, description="--ring-degree")
    hsdp: int = Field(default=0, ge=0, description="--hsdp-shard-size with --use-hsdp; 0 = off")
    vae: int = Field(default=1, ge=1, description="--vae-patch-parallel-size")
    fp8: bool = Field(default=False, description='FP8 weights: --diffusion-quantization-config {"method":"fp8"}')
    attn: AttnBackend = Field(default="auto", description="--diffusion-attention-backend; auto: the platform's")

    # ---- sizes ---------------------------------------------------------------------------------
    @property
    def parallel_product(self) -> int:
        """T x (U x R) x C: the world size the non-HSDP dimensions ask for."""
        return self.tp * self.ulysses * self.ring * self.cfg

    @property
    def world_size(self) -> int:
        """GPUs of one replica. Standalone HSDP (all else 1) sets the world by its shard size."""
        if self.hsdp and self.parallel_product == 1:
            return self.hsdp
        return self.parallel_product

    @property
    def hsdp_replicate(self) -> int:
        return self.world_size // self.hsdp if self.hsdp else 1

    @property
    def sequence_parallel(self) -> int:
        return self.ulysses * self.ring

    @property
    def gpus(self) -> int:
        """GPUs the whole plan uses on a node: replicas x world size."""
        return self.replicas * self.world_size

    # ---- the grammar ---------------------------------------------------------------------------
    @classmethod
    def parse(cls, text: str | Plan) -> Plan:
        """Parse a plan string such as 'cfg2-u4-hsdp8', '8x1gpu' or '2xtp4' (any token order); a Plan is itself.

        A Plan is frozen, so a string parsed once is answered from a cache (the search parses the same few
        hundred plan strings many thousand times a decision); a string that is refused is never cached."""
        if isinstance(text, Plan):
            return text
        found = _PARSED.get(text) if cls is Plan else None
        if found is None:
            found = cls._parse(text)
            if cls is Plan:
                if len(_PARSED) >= _PARSED_MAX:
                    _PARSED.clear()
                _PARSED[text] = found
        return found

    @classmethod
    def _parse(cls, text: str) -> Plan:
        raw = text.strip().lower()
        if not raw:
            raise InvalidInput("plan", text, PLAN_GRAMMAR)
        fields: dict[str, int | bool | str] = {}
        body = raw
        prefix = re.match(r"^(\d+)x(.+)$", raw)
        if prefix:
            fields["replicas"] = int(prefix.group(1))
            body = prefix.group(2)
        for token in body.split("-"):
            if token == "1gpu":
                continue
            if token == "fp8":
                fields["fp8"] = True
                continue
            if token in ATTN_BACKENDS:
                if "attn" in fields:
                    raise InvalidInput("plan", text, PLAN_GRAMMAR, "one attention backend per plan")
                fields["attn"] = token
                continue
            match = _TOKEN.match(token)
            if not match:
                raise InvalidInput("plan", text, PLAN_GRAMMAR, f"unknown token {token!r}")
            name = _FIELD[match.group(1)]
            if name in fields:
                raise InvalidInput("plan", text, PLAN_GRAMMAR, f"{match.group(1)} appears twice")
            value = int(match.group(2))
            if value < 1:
                raise InvalidInput("plan", text, PLAN_GRAMMAR, f"degrees are positive integers, got {token!r}")
            fields[name] = value
        try:
            return cls.model_validate(fields)
        except ValueError as exc:  # pydantic bounds (replicas >= 1, ...)
            raise InvalidInput("plan", text, PLAN_GRAMMAR, str(exc).splitlines()[-1].strip()) from exc

    def __str__(self) -> str:
        parts = []
        for name, label in (("tp", "tp"), ("cfg", "cfg"), ("ulysses", "u"), ("ring", "r")):
            value = getattr(self, name)
            if value > 1:
                parts.append(f"{label}{value}")
        if self.hsdp:
            parts.append(f"hsdp{self.hsdp}")
        if self.vae > 1:
            parts.append(f"vae{self.vae}")
        if self.fp8:
            parts.append("fp8")
        if self.attn != "auto":
            parts.append(self.attn)
        body = "-".join(parts) or "1gpu"
        return f"{self.replicas}x{body}" if self.replicas > 1 else body

    @property
    def name(self) -> str:
        return str(self)

    def single_replica(self) -> Plan:
        """The same layout as one replica (what one vLLM-Omni server runs)."""
        return self.model_copy(update={"replicas": 1})

    # ---- the serve flags -----------------------------------------------------------------------
    def serve_flags(self, release: Release = PINNED) -> list[str]:
        """`vllm serve --omni` flags for one replica of this plan, spelt as `release` spells them."""
        flags: list[str] = []
        if self.tp > 1:
            flags += [release.tensor_parallel, str(self.tp)]
        if self.cfg > 1:
            flags += [release.cfg_parallel, str(self.cfg)]
        if self.ulysses > 1:
            flags += [release.ulysses, str(self.ulysses)]
        if self.ring > 1:
            flags += [release.ring, str(self.ring)]
        if self.hsdp:
            flags += [release.use_hsdp, release.hsdp_shard, str(self.hsdp)]
            if self.hsdp_replicate > 1:
                flags += [release.hsdp_replicate, str(self.hsdp_replicate)]
        if self.vae > 1:
            flags += [release.vae_patch_parallel, str(self.vae)]
        if self.fp8:
            flags += list(release.fp8)
        if self.attn != "auto":
            flags += [release.attention_backend, ATTN_BACKENDS[self.attn]]
        return flags


_PARSED: dict[str, Plan] = {}
_PARSED_MAX = 4096


def _plan_of(value: object) -> Plan:
    if isinstance(value, Plan):
        return value
    if not isinstance(value, str):
        raise InvalidInput("plan", value, PLAN_GRAMMAR)
    return Plan.parse(value)


# A field that holds a Plan and reads and writes as its string ("cfg2-u4-hsdp8"): stored records and the tools'
# JSON keep the form people type, while code asks the plan's fields instead of parsing the string again. Its JSON
# schema is a plain string's, so a word's `plan: str` becoming a PlanField leaves the MCP tool listing as it was.
PlanField = Annotated[
    Plan,
    PlainValidator(_plan_of, json_schema_input_type=str),
    PlainSerializer(str, return_type=str),
]
# The same, with the schema a Deployment's and a Candidate's plan have always listed (a described string, no
# title): kept so the tools' output schemas do not change.
DescribedPlanField = Annotated[
    Plan,
    BeforeValidator(_plan_of),
    PlainSerializer(str, return_type=str),
    WithJsonSchema({"type": "string", "description": "a parallel plan, e.g. cfg2-u4-hsdp8, tp8, 8x1gpu"}),
]
