"""DeployRequest: what a deploy asks for, as one word (the deploy tool's arguments, less its confirmation)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class DeployRequest(BaseModel):
    """One deployment to start: the plan on a GPU type, where, under which engine, and the twin's settings.

    The CLI, the MCP deploy tool, the agent and Python callers all ask the deploy capability with this word
    (tools/deployments/deploy.py: quote_deploy, deploy). It carries values as given: the one set of deploy checks
    (tools/deployments/checks.py) refuses a bad one before anything starts, naming the field and what is valid."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu: str = Field(description="GPU type, e.g. H200 or B200")
    plan: str = Field(description="the parallel plan, e.g. cfg2-u4-hsdp8")
    infra: str = Field(default="local", description="local, slurm/NAME, kubernetes[/CONTEXT] or a cloud")
    engine: str = Field(default="twin", description="twin (a modelled server, no GPU) or vllm-omni (the real one)")
    capacity: str = "on-demand"
    model: str = "cosmos3-super"
    twin_profile: str | None = Field(
        default=None, description="twin only: the profile YAML the twin runs with (the rehearsal's truth)"
    )
    twin_profiles: list[str] = Field(
        default_factory=list,
        description="twin only: profile files the twin may serve; the first one for the GPU type is used (one for "
        "another GPU type is passed over), else the shipped profile",
    )
    time_scale: float = Field(default=1.0, description="twin only: divide its sleeps by this")
    hours: float = Field(default=1.0, description="hours it is leased for beyond its start")
    usd_per_hour: float | None = Field(default=None, description="the price of your own GPUs (no offer)")
    run_id: str | None = Field(default=None, description="tuning run that owns the deployment")
    noise_seed: int | None = Field(default=None, description="twin only: seed of its run-to-run noise")
    guardrails: bool = Field(
        default=False,
        description="run the server with Cosmos3's guardrails (vLLM-Omni's default is on; off renders "
        "--no-guardrails): the workload's, so the deployment runs what its predictions and benchmarks assume",
    )
