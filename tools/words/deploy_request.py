"""DeployRequest: what a deploy asks for, as one word (the deploy tool's arguments, less its confirmation)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class DeployRequest(BaseModel):
    """One deployment to start: the plan on a GPU type, where, under which engine, and the twin's settings."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu: str = Field(description="GPU type, e.g. H200 or B200")
    plan: str = Field(description="the parallel plan, e.g. cfg2-u4-hsdp8")
    infra: str = Field(default="local", description="local, slurm/NAME, kubernetes[/CONTEXT] or a cloud")
    engine: Literal["twin", "vllm-omni"] = "twin"
    capacity: str = "on-demand"
    model: str = "cosmos3-super"
    twin_profiles: list[str] = Field(
        default_factory=list,
        description="twin only: profile files the twin may serve; the first one for the GPU type is used (one for "
        "another GPU type is passed over), else the shipped profile",
    )
    time_scale: float | None = Field(default=None, gt=0, description="twin only: divide its sleeps by this")
    hours: float | None = Field(default=None, ge=0, description="hours it is leased for beyond its start")
    run_id: str | None = Field(default=None, description="tuning run that owns the deployment")
    noise_seed: int | None = Field(default=None, ge=0, description="twin only: seed of its run-to-run noise")
