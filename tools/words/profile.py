"""Profile: the calibrated numbers of the performance model for one GPU type.

The performance model (policies/perf_model.py) reads a Profile; so does the twin engine, which lets a
rehearsal run against a profile that differs from what the agent believes. A profile is a YAML file
that users can edit and refit.
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from worldtune.tools.words.errors import InvalidInput

MAX_PROFILE_BYTES = 1_000_000  # the shipped profiles are ~5 kB; anything this big is not a profile
BasisKind = Literal["fitted", "measured", "published", "assumed"]

# Prior one-sigma relative (log-space) uncertainty of a parameter, by how it is known, when its basis gives none.
DEFAULT_SIGMA: dict[str, float] = {"measured": 0.05, "published": 0.08, "fitted": 0.15, "assumed": 0.5}


class ParamBasis(BaseModel):
    """How one Profile parameter is known: fitted, measured (the file it came from), published, or assumed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: BasisKind
    source: str = Field(default="", description="the measurement file, published cell or reason behind the value")
    sigma: float | None = Field(
        default=None, ge=0, description="prior one-sigma relative uncertainty (log-space); by kind if unset"
    )

    @property
    def relative_sigma(self) -> float:
        return DEFAULT_SIGMA[self.kind] if self.sigma is None else self.sigma


class Profile(BaseModel):
    """Effective rates, link bandwidths, fixed costs, load time, memory terms and noise of one GPU type."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu: str
    source: str = Field(description="where the numbers come from (fit, measurement, hand edit)")
    date: str = Field(description="ISO date the numbers were made")
    hardware: str = ""

    # compute (generator, BF16)
    linear_tflops: float = Field(gt=0, description="effective rate of the linear layers at large size")
    attn_tflops: float = Field(gt=0, description="effective rate of attention at large size")
    half_rate_tokens: float = Field(
        ge=0, description="tokens per GPU at which both rates halve (small work runs less efficiently)"
    )
    fp8_linear_speedup: float = Field(default=1.6, gt=0, description="FP8 over BF16 on linear layers")
    fp8_attn_speedup: float = Field(default=1.0, gt=0, description="FP8 over BF16 on attention (0.30: BF16 attention)")
    # attention backend (--diffusion-attention-backend): rates relative to attn_tflops, the platform default's
    attn_backend_default: Literal["fa", "cudnn", "fi"] = Field(
        default="fa", description="the backend vLLM-Omni picks when the plan names none (H200: FA3; B200: cuDNN class)"
    )
    attn_fa_factor: float = Field(default=1.0, gt=0, description="FLASH_ATTN rate over attn_tflops")
    attn_cudnn_factor: float = Field(default=1.0, gt=0, description="CUDNN_ATTN rate over attn_tflops")
    attn_fi_factor: float = Field(default=1.0, gt=0, description="FLASHINFER_ATTN rate over attn_tflops")
    # ring attention's compute (the K/V passing is under links): chunked kernels, the LSE merge, per-hop sync
    ring_chunk_efficiency: float = Field(
        default=1.0, gt=0, le=1, description="attention rate over r key chunks relative to one call"
    )
    ring_merge_ms_per_gelem: float = Field(
        default=0.0, ge=0, description="log-sum-exp merge: ms per 1e9 output elements per extra hop"
    )
    ring_hop_latency_us: float = Field(default=0.0, ge=0, description="synchronisation per ring hop per layer")
    ulysses_pack_ms_per_gb: float = Field(
        default=0.0, ge=0, description="head pack/unpack copies around Ulysses' all-to-alls: ms per GB moved"
    )
    step_overhead_s: float = Field(default=0.02, ge=0, description="scheduler and launch time per step")

    # links (per-GPU bus bandwidth as NCCL tests report it)
    link_gbps: float = Field(gt=0, description="effective collective bus bandwidth, GB/s")
    a2a_gbps: float | None = Field(default=None, description="all-to-all bus bandwidth; link_gbps if unset")
    allreduce_gbps: float | None = Field(default=None, description="all-reduce bus bandwidth")
    allgather_gbps: float | None = Field(default=None, description="all-gather bus bandwidth")
    collective_latency_us: float = Field(ge=0, description="fixed cost of one collective call")
    hsdp_overlap: float = Field(default=0.9, ge=0, le=1, description="share of HSDP gathers hidden")
    ring_overlap: float = Field(default=0.8, ge=0, le=1, description="share of ring K/V passing hidden")

    # per-request fixed part at the anchor workload for Cosmos3-Super (VAE decode on one GPU)
    text_encode_s: float = Field(ge=0)
    vae_decode_s: float = Field(ge=0)
    mux_s: float = Field(ge=0)
    vae_parallel_efficiency: float = Field(
        default=0.8, gt=0, le=1, description="used only while vae_tile_area_cost is 0 (profiles before issue 13)"
    )
    # VAE patch parallel (tiled decode spread over the ranks): each tile costs a share of the whole decode
    vae_tile_fixed_share: float = Field(default=0.0, ge=0, description="per-tile cost, share of one whole decode")
    vae_tile_area_cost: float = Field(
        default=0.0, ge=0, description="per-tile cost per unit of area share; 0 = old vae_parallel_efficiency model"
    )
    pipelined_s: float = Field(
        default=0.0,
        ge=0,
        description="part of one request's client time that overlaps the next queued request, at the anchor workload "
        "(scaled with the clip's pixels x frames)",
    )
    # the second clock: what a client sees beyond the server's generation time (vLLM-Omni's stage time)
    client_overhead_s: float = Field(
        default=0.0,
        ge=0,
        description="a client's end-to-end time of one sync request at the anchor workload beyond the server's "
        "generation time: the API server's MP4 encode, the request and the transfer (0: a profile from before the "
        "two clocks, whose latency is one clock)",
    )
    guardrail_base_s: float = Field(default=2.0, ge=0, description="guard model cost per clip, short prompt")
    guardrail_per_word_s: float = Field(default=0.2, ge=0, description="extra guard cost per prompt word")
    guardrail_startup_s: float = Field(default=20.0, ge=0)

    # start-up
    load_base_s: float = Field(default=40.0, ge=0, description="process start, CUDA init, warm-up")
    load_gib_per_s_warm: float = Field(default=0.47, gt=0, description="weights from page cache")
    load_gib_per_s_cold: float = Field(default=0.2, gt=0, description="weights from disk")
    load_tp_efficiency: float = Field(
        default=0.62, gt=0, le=1, description="tensor parallel: each rank reads 1/tp of the weights, at this efficiency"
    )

    # memory per GPU
    runtime_gib: float = Field(default=3.6, ge=0, description="CUDA context, NCCL and allocator slack")
    activation_gib_per_ktoken: float = Field(default=0.1, ge=0)
    vae_decode_gib: float = Field(default=8.0, ge=0, description="VAE decode workspace at the anchor workload")
    hsdp_buffer_gib: float = Field(default=14.0, ge=0, description="FSDP2 gather/prefetch buffers at large shards")

    noise_cv: float = Field(default=0.002, ge=0, description="run-to-run spread of per-step time")
    spot_preemptions_per_node_hour: float = Field(
        default=0.0,
        ge=0,
        description="rehearsal truth: how often a spot node is taken back (a Poisson rate per node "
        "and model hour); the local backend's spot twins exit at a drawn moment, as a vanished node. 0: never",
    )
    assumed: list[str] = Field(default_factory=list, description="fields set by assumption, not data")
    basis: dict[str, ParamBasis] = Field(
        default_factory=dict, description="per parameter: fitted, measured, published or assumed, and its uncertainty"
    )
    fit: dict[str, Any] = Field(default_factory=dict, description="how the fit went (residuals, cells)")

    def basis_of(self, name: str) -> ParamBasis:
        """How parameter `name` is known: its `basis` entry, else 'assumed' if listed in `assumed`, else 'fitted'."""
        if name not in type(self).model_fields:
            raise InvalidInput("parameter", name, "a Profile field")
        if name in self.basis:
            return self.basis[name]
        return ParamBasis(kind="assumed" if name in self.assumed else "fitted", source=self.source)

    def uncertainty(self, name: str) -> float:
        """Prior one-sigma relative uncertainty of parameter `name` (what the search's posterior starts from)."""
        return self.basis_of(name).relative_sigma

    def load_time_s(self, weights_gib: float, cold: bool = False, tp: int = 1) -> float:
        """Seconds from process start to ready for weights of this size (from page cache unless cold).

        Warm: every rank reads the whole checkpoint from the page cache (HSDP shards it after the read),
        except tensor parallel, where each of the tp ranks reads its 1/tp slice in parallel. Cold: the
        first load on a node also reads the checkpoint from disk into the page cache once, whatever the
        plan (an assumption: the disk, not the ranks, bounds that read).
        """
        warm = self.load_base_s + weights_gib / self.load_gib_per_s_warm / (
            tp * self.load_tp_efficiency if tp > 1 else 1
        )
        if not cold:
            return warm
        return warm + weights_gib * max(0.0, 1 / self.load_gib_per_s_cold - 1 / self.load_gib_per_s_warm)

    def bandwidth(self, collective: str) -> float:
        """Bus bandwidth for 'a2a', 'allreduce' or 'allgather', in bytes per second."""
        if collective == "a2a":
            value = self.a2a_gbps
        elif collective == "allreduce":
            value = self.allreduce_gbps
        elif collective == "allgather":
            value = self.allgather_gbps
        else:
            raise KeyError(collective)
        return (value or self.link_gbps) * 1e9

    @classmethod
    def load(cls, path: str | Path, field: str = "profile") -> Profile:
        """Read a profile file; a missing, unreadable or malformed file is a clear error that never quotes it.

        The error names the path, and for a file that is YAML but not a profile, only Profile's own field
        names: the file may be anything its reader can open (a token, a password file), so nothing it holds
        (not a line, not a key, not a value) is echoed back.
        """
        file = Path(path)
        try:
            info = file.stat()
        except (OSError, ValueError):
            raise InvalidInput(field, str(path), "a readable profile YAML file") from None
        if not stat.S_ISREG(info.st_mode):
            raise InvalidInput(field, str(path), "a regular file (not a folder, device or pipe)")
        if info.st_size > MAX_PROFILE_BYTES:
            raise InvalidInput(field, str(path), f"a profile YAML of at most {MAX_PROFILE_BYTES} bytes")
        try:
            with file.open("rb") as handle:
                raw = handle.read(MAX_PROFILE_BYTES + 1)
            data = yaml.safe_load(raw.decode("utf-8"))
        except (OSError, UnicodeDecodeError):
            raise InvalidInput(field, str(path), "a readable UTF-8 profile YAML file") from None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" (line {mark.line + 1})" if mark is not None else ""
            raise InvalidInput(field, str(path), f"a profile YAML file: it is not YAML{where}") from None
        if not isinstance(data, dict):
            raise InvalidInput(field, str(path), "a YAML mapping of profile fields")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise InvalidInput(field, str(path), f"a profile: {_summary(exc)}") from None

    def dump(self, path: str | Path) -> None:
        """Write the profile as YAML (stable key order, readable by people)."""
        Path(path).write_text(yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False))

    def with_changes(self, **changes: Any) -> Profile:
        data = self.model_dump()
        data.update(changes)
        return Profile.model_validate(data)


def _summary(exc: ValidationError) -> str:
    """A profile's validation errors by Profile field name only: keys it does not know are counted, not named."""
    known = set(Profile.model_fields)
    missing, wrong, unknown = [], [], 0
    for err in exc.errors():
        top = str(err["loc"][0]) if err["loc"] else ""
        if top not in known:
            unknown += 1
        elif err["type"] == "missing":
            missing.append(top)
        else:
            wrong.append(top)
    parts = []
    if missing:
        parts.append(f"missing {', '.join(sorted(set(missing)))}")
    if wrong:
        parts.append(f"invalid {', '.join(sorted(set(wrong)))}")
    if unknown:
        parts.append(f"{unknown} field(s) a Profile does not have")
    return "; ".join(parts) or "not a profile"
