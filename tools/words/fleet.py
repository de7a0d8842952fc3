"""Fleet words: nodes of one offer running replicas of one plan, an autoscaler, and what a simulated day gives.

A node is what SkyServe calls a replica (one cluster of one offer); it hosts `servers_per_node` vLLM-Omni
servers (the plan's replicas), each serving one request at a time (no step batching for Cosmos 3).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.plan import Plan

Policy = Literal["fixed", "qps", "queue"]
POLICIES: tuple[str, ...] = ("fixed", "qps", "queue")
Dispatch = Literal["least_loaded", "central"]
# SkyServe's defaults (sky/serve/constants.py): upscale after 300 s, downscale after 1200 s, decide every 20 s,
# QPS measured over the last 60 s.
SKYSERVE_UPSCALE_DELAY_S = 300.0
SKYSERVE_DOWNSCALE_DELAY_S = 1200.0
SKYSERVE_DECISION_INTERVAL_S = 20.0
SKYSERVE_QPS_WINDOW_S = 60.0


class Autoscaler(BaseModel):
    """How many nodes to run: fixed, SkyServe's requests-per-second rule, or worldtune's queue-length rule."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    policy: Policy = "fixed"
    min_replicas: int = Field(default=1, ge=0, le=64, description="nodes kept; 0 = scale to zero")
    max_replicas: int = Field(default=1, ge=1, le=64)
    target_qps_per_replica: float | None = Field(default=None, gt=0, allow_inf_nan=False, description="qps policy")
    target_queue_per_server: float | None = Field(
        default=None, gt=0, allow_inf_nan=False, description="queue policy: outstanding requests per server"
    )
    upscale_delay_s: float = Field(default=SKYSERVE_UPSCALE_DELAY_S, ge=0, le=86400)
    downscale_delay_s: float = Field(default=SKYSERVE_DOWNSCALE_DELAY_S, ge=0, le=86400)
    decision_interval_s: float = Field(default=SKYSERVE_DECISION_INTERVAL_S, gt=0, le=3600)
    qps_window_s: float = Field(default=SKYSERVE_QPS_WINDOW_S, gt=0, le=86400)

    @model_validator(mode="after")
    def _consistent(self) -> Autoscaler:
        if self.max_replicas < self.min_replicas:
            raise InvalidInput("max_replicas", self.max_replicas, f">= min_replicas={self.min_replicas}")
        if self.policy == "fixed" and self.min_replicas != self.max_replicas:
            raise InvalidInput(
                "max_replicas", self.max_replicas, f"= min_replicas={self.min_replicas} for a fixed fleet"
            )
        if self.policy == "fixed" and self.min_replicas == 0:
            raise InvalidInput("min_replicas", 0, "at least 1 node for a fixed fleet")
        if self.policy == "qps" and self.target_qps_per_replica is None:
            raise InvalidInput("target_qps_per_replica", None, "a positive requests/s per node for the qps policy")
        if self.policy == "queue" and self.target_queue_per_server is None:
            raise InvalidInput("target_queue_per_server", None, "a positive queue length for the queue policy")
        return self

    def describe(self) -> str:
        if self.policy == "fixed":
            return f"fixed {self.min_replicas} node(s)"
        rule = (
            f"{self.target_qps_per_replica:.4g} req/s per node"
            if self.policy == "qps"
            else f"{self.target_queue_per_server:g} outstanding per server"
        )
        return (
            f"{self.policy} {self.min_replicas}-{self.max_replicas} nodes, {rule}, up after "
            f"{self.upscale_delay_s:g} s, down after {self.downscale_delay_s:g} s"
        )


class Fleet(BaseModel):
    """Nodes of one offer, each running `servers_per_node` servers of one plan, with service and start-up times."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    plan: str = "plan"
    gpu: str = "H200"
    offer_id: str = ""
    capacity: Literal["on-demand", "spot"] = "on-demand"
    servers_per_node: int = Field(default=1, ge=1, le=8)
    service_s: float = Field(gt=0, allow_inf_nan=False, description="mean time a server is busy per request")
    latency_s: float | None = Field(default=None, gt=0, description="one request's own latency (default: service)")
    service_cv: float = Field(default=0.0, ge=0, le=2, description="per-request spread (lognormal coefficient)")
    service_distribution: Literal["lognormal", "exponential"] = Field(
        default="lognormal", description="exponential (M/M/c checks) ignores service_cv"
    )
    provision_s: float = Field(default=300.0, ge=0, le=86400, description="launch to a ready node")
    load_s: float = Field(default=0.0, ge=0, le=86400, description="model load once the node is up")
    usd_per_node_hour: float = Field(ge=0, allow_inf_nan=False)
    ondemand_usd_per_node_hour: float | None = Field(default=None, ge=0, description="fallback nodes' price")
    preemptions_per_node_hour: float = Field(default=0.0, ge=0, le=10, description="spot: stated preemption rate")
    base_ondemand_fallback: int = Field(default=0, ge=0, le=64, description="nodes always on-demand (spot fleets)")
    autoscaler: Autoscaler = Field(default_factory=Autoscaler)
    dispatch: Dispatch = Field(default="least_loaded", description="least_loaded at arrival, or central FIFO")

    @model_validator(mode="after")
    def _spot(self) -> Fleet:
        if self.capacity == "on-demand" and self.preemptions_per_node_hour > 0:
            raise InvalidInput("preemptions_per_node_hour", self.preemptions_per_node_hour, "0 for on-demand nodes")
        return self

    @property
    def layout(self) -> Plan:
        """The plan its servers run, as a Plan (a fleet keeps the string: its default names no real plan, and the
        simulator never needs more than the name)."""
        return Plan.parse(self.plan)

    @property
    def cold_start_s(self) -> float:
        return self.provision_s + self.load_s

    def describe(self) -> str:
        spot = f", {self.base_ondemand_fallback} on-demand fallback" if self.capacity == "spot" else ""
        return (
            f"{self.plan} x{self.servers_per_node}/node on {self.offer_id or self.gpu} ({self.capacity}{spot}), "
            f"{self.autoscaler.describe()}"
        )


class FleetMoment(BaseModel):
    """The fleet at one moment of the simulated day."""

    t_s: float
    nodes: int = Field(description="nodes billed (launching or ready)")
    ready: int
    queued: int = Field(description="requests waiting (not in service)")


class FleetDay(BaseModel):
    """What the discrete-event model gives for one simulated day of one fleet (simulated, not measured)."""

    basis: str = "simulated (policies/fleet_sim.py): service times from the performance model, stated rates"
    seed: int
    arrivals: int
    completed: int
    e2e_s: dict[str, float] = Field(default_factory=dict, description="p50/p90/p95/p99 end to end (s)")
    wait_mean_s: float = 0.0
    wait_p95_s: float = 0.0
    cold_starts: int = Field(default=0, description="nodes launched after the day began (each pays provision+load)")
    waited_on_cold_start: int = Field(default=0, description="requests that arrived with no ready server")
    preemptions: int = 0
    node_hours: float = 0.0
    ondemand_node_hours: float = 0.0
    cost_usd: float = 0.0
    usd_per_clip: float | None = None
    max_nodes: int = 0
    timeline: list[FleetMoment] = Field(default_factory=list)
    answers: list[tuple[float, float]] = Field(
        default_factory=list, description="(arrival s, end to end s) of every request: kept with the timeline"
    )
    e2e_samples_s: list[float] = Field(default_factory=list, exclude=True, description="every request's end to end")

    def percentile(self, p: int) -> float:
        return self.e2e_s.get(f"p{p}", float("inf"))
