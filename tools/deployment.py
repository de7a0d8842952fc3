"""Deployment: an offer + a plan + the engine running on it; and the one interface every infra implements.

Infra backends (local processes, SkyPilot clusters, Kubernetes) share `Backend`: launch, status,
teardown. Every cluster a backend starts is written to the ledger (tools/store.py) before launch and
marked gone after teardown, so nothing is ever left running unnoticed.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from worldtune.tools.offer import Offer

Engine = Literal["twin", "vllm-omni"]
ENGINES: tuple[str, ...] = ("twin", "vllm-omni")
DeploymentState = Literal["pending", "provisioning", "loading", "ready", "failed", "preempted", "terminated"]
Progress = Callable[[str, float | None], None]  # (message, fraction done or None)


def new_deployment_id() -> str:
    return f"wt-{secrets.token_hex(4)}"


# The environment variable (and SkyPilot secret) that carries a public server's API key: `vllm serve --api-key`
# reads it on the cluster, worldtune's benchmark and readiness checks send it as a bearer token.
API_KEY_ENV = "WORLDTUNE_API_KEY"


class Deployment(BaseModel):
    """A plan running (or about to run) on an offer, with its endpoints and state."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(default_factory=new_deployment_id)
    run_id: str | None = Field(default=None, description="tuning run that owns it, if any")
    model: str = "cosmos3-super"
    gpu: str
    plan: str
    infra: str = "local"
    engine: Engine = "twin"
    capacity: str = "on-demand"
    offer: Offer | None = None
    usd_per_hour: float = 0.0
    hold_hours: float | None = Field(default=None, ge=0, description="hours the caller asked to keep it up once ready")
    committed_usd: float = Field(
        default=0.0, ge=0, description="price x hours asked (provisioning + load + hold) when it was started"
    )
    state: DeploymentState = "pending"
    endpoints: list[str] = Field(default_factory=list, description="base URLs, one per replica")
    cluster: str | None = Field(default=None, description="SkyPilot cluster / Kubernetes name / local pid group")
    twin_profile: str | None = Field(default=None, description="profile file the twin engine runs with")
    time_scale: float = Field(default=1.0, gt=0, description="twin only: sleeps divided by this")
    created_at: float = Field(default_factory=time.time)
    ready_at: float | None = None
    terminated_at: float | None = None
    detail: str = ""

    @property
    def alive(self) -> bool:
        return self.state in ("pending", "provisioning", "loading", "ready")

    def gpu_hours(self, now: float | None = None) -> float:
        """GPU-hours billed so far (from creation to termination or now)."""
        end = self.terminated_at or now or time.time()
        gpus = self.offer.gpu_count if self.offer else 0
        return max(0.0, end - self.created_at) / 3600.0 * gpus


class Backend(Protocol):
    """What an infra must do to host deployments."""

    name: str

    def launch(self, deployment: Deployment, progress: Progress | None = None) -> Deployment:
        """Start the engine under the plan; return once ready (state 'ready') or raise."""
        ...

    def status(self, deployment: Deployment) -> Deployment:
        """Refresh the state (detects preemption / a vanished cluster)."""
        ...

    def teardown(self, deployment: Deployment) -> Deployment:
        """Stop everything the deployment started; idempotent."""
        ...
