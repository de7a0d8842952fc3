"""Infra: where a deployment runs, parsed once from what users type (local, slurm/NAME, kubernetes, CLOUD[/REGION]).

Every module that needs to know what kind of infra a string names (deploy's backend choice, the spend
quote, the SkyPilot preview, the agent's goal) asks `Infra.parse`, so `local/x` cannot be read as local
by one module and as a cloud by another. A string that is none of the known forms is refused here,
naming the value and the forms that would do.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, WithJsonSchema

from worldtune.tools.words.errors import InvalidInput

InfraKind = Literal["local", "slurm", "kubernetes", "cloud"]

# SkyPilot 0.14's clouds that rent GPU nodes. Only these can be a `CLOUD` or `CLOUD/REGION` infra;
# whether worldtune has prices for one is the spend quote's question (tools/plans/spend.py), not the parser's.
SKYPILOT_CLOUDS: tuple[str, ...] = (
    "aws",
    "azure",
    "cudo",
    "do",
    "fluidstack",
    "gcp",
    "hyperbolic",
    "ibm",
    "lambda",
    "nebius",
    "oci",
    "paperspace",
    "primeintellect",
    "runpod",
    "scp",
    "seeweb",
    "shadeform",
    "vast",
    "vsphere",
)
MAX_INFRA_CHARS = 100
_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,62}")
FORMS = "local, slurm/NAME, kubernetes, or a SkyPilot cloud (nebius, aws, lambda, ...) optionally /REGION"


class Infra(BaseModel):
    """One parsed infra string: its kind, the cloud or cluster it names, and the region if any."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: InfraKind
    name: str = Field(description="local | slurm | kubernetes | the cloud's name (nebius, aws, ...)")
    cluster: str | None = Field(default=None, description="slurm only: the cluster name after 'slurm/'")
    region: str | None = Field(default=None, description="cloud only: the region after the cloud's name")

    @classmethod
    def parse(cls, text: object, field: str = "infra") -> Infra:
        """The Infra `text` names (an Infra: itself); InvalidInput(field, value, the valid forms) for anything else."""
        if isinstance(text, Infra):
            return text
        if not isinstance(text, str) or not text.strip():
            raise InvalidInput(field, text, FORMS)
        if len(text) > MAX_INFRA_CHARS:
            raise InvalidInput(field, text[:40] + "...", f"at most {MAX_INFRA_CHARS} characters: {FORMS}")
        value = text.strip().lower()
        head, sep, tail = value.partition("/")
        if value == "local":
            return cls(kind="local", name="local")
        if value in ("kubernetes", "k8s"):
            return cls(kind="kubernetes", name="kubernetes")
        if head in ("local", "kubernetes", "k8s"):
            # `local/x` once skipped confirmation yet went to SkyPilot: the plain name or nothing
            raise InvalidInput(field, text, f"'{'local' if head == 'local' else 'kubernetes'}' with nothing after it")
        if head == "slurm":
            if not sep or not _NAME.fullmatch(tail):
                raise InvalidInput(
                    field, text, "slurm/<cluster name> (letters, digits, '_', '.', '-')", "e.g. slurm/localcluster"
                )
            return cls(kind="slurm", name="slurm", cluster=tail)
        if head not in SKYPILOT_CLOUDS:
            raise InvalidInput(field, text, FORMS, f"known clouds: {', '.join(SKYPILOT_CLOUDS)}")
        if sep and not _NAME.fullmatch(tail):
            raise InvalidInput(field, text, f"{head} or {head}/REGION (a region name such as eu-north1)")
        return cls(kind="cloud", name=head, region=tail if sep else None)

    @property
    def is_local(self) -> bool:
        return self.kind == "local"

    @property
    def capacities(self) -> tuple[str, ...]:
        """The capacities a deployment can have here. Slurm: on-demand only (SkyPilot has no spot or SkyServe
        there); Kubernetes: no serverless (that is SkyServe); a cloud: all three; local twins: all three, since
        they rehearse an offer and are only priced as it (serverless as one node of its replicas)."""
        if self.kind == "slurm":
            return ("on-demand",)
        if self.kind == "kubernetes":
            return ("on-demand", "spot")
        return ("on-demand", "spot", "serverless")

    @property
    def is_own_hardware(self) -> bool:
        """Slurm and Kubernetes clusters are the user's own: nothing to rent, but their GPUs are not free."""
        return self.kind in ("slurm", "kubernetes")

    def __str__(self) -> str:
        if self.kind == "slurm":
            return f"slurm/{self.cluster}"
        if self.kind == "cloud" and self.region:
            return f"{self.name}/{self.region}"
        return self.name


def _infra_of(value: object) -> Infra:
    return value if isinstance(value, Infra) else Infra.parse(value)


# A field that holds an Infra and reads and writes as its string ("slurm/worldtune-local"): stored deployments,
# the tools' JSON and the CLI keep the form people type, while code asks `.kind` instead of `startswith("slurm/")`.
InfraField = Annotated[
    Infra,
    BeforeValidator(_infra_of),
    PlainSerializer(str, return_type=str),
    WithJsonSchema({"type": "string", "description": FORMS}),
]
