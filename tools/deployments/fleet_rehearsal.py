"""Open-loop rehearsal of a chosen fleet on local twins, compared with the queueing model's prediction.

The fleet's nodes start as twin deployments on this machine (infra local, one twin process per server),
the benchmark's open-loop Poisson client sends the traffic's peak rate at a time scale to every server
(least in flight first), and the answers give measured end-to-end percentiles and queue waits in model
seconds. The twins' load time is the measured cold start (scaled back). What is rehearsed is the fleet at
its warm size: autoscaling, spot preemptions and provisioning are not (no cloud here); the prediction
beside it is the simulation of that same fixed fleet under the same number of arrivals.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, model_serializer

from worldtune.policies.fleet_sim import simulate_day
from worldtune.tools.bench.benchmark import BenchmarkSpec, new_benchmark_id, run_benchmark
from worldtune.tools.deployments.capacity import CapacityPlan
from worldtune.tools.deployments.deploy import deploy, teardown
from worldtune.tools.store.database import Store
from worldtune.tools.words.deploy_request import DeployRequest
from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.fleet import Autoscaler, Fleet
from worldtune.tools.words.traffic import Traffic
from worldtune.tools.words.workload import Workload


class FleetRehearsal(BaseModel):
    """Measured on twins (model seconds) beside the model's prediction for the same fixed fleet."""

    basis: str = (
        "measured: open-loop Poisson arrivals against local twin replicas at a time scale (model seconds); "
        "predicted: the discrete-event model of the same fixed fleet; cost: the offer's price x nodes (billed, "
        "not spent: twins are free)"
    )
    nodes: int
    servers: int
    requests: int
    answered: int
    time_scale: float
    percentile: int
    measured_p_s: float | None = None
    predicted_p_s: float | None = None
    measured_p50_s: float | None = None
    predicted_p50_s: float | None = None
    measured_wait_mean_s: float | None = None
    predicted_wait_mean_s: float | None = None
    measured_cold_start_s: float | None = Field(
        default=None,
        description="launch-to-ready wall time x time scale: the twin's model load plus process start-up, which "
        "does not shrink with the time scale (an upper bound; no provisioning locally)",
    )
    measured_latency_mean_s: float | None = Field(
        default=None,
        description="mean server time (X-Inference-Time-S, model seconds) of the requests that found their server "
        "idle: the plan's own latency per request, measured",
    )
    measured_latency_sem_s: float | None = Field(default=None, description="its standard error")
    predicted_latency_s: float | None = Field(default=None, description="the model's latency per request")
    measured_daily_cost_usd: float = Field(description="the rehearsed nodes billed for 24 h at the offer's price")
    predicted_daily_cost_usd: float
    meets: bool | None = None
    deployments: list[str] = Field(default_factory=list)

    def latency_disagrees(self, tolerance: float = 0.03) -> bool:
        """The measured mean latency differs from the model's by more than `tolerance` and two standard errors."""
        if self.measured_latency_mean_s is None or not self.predicted_latency_s or self.measured_latency_sem_s is None:
            return False  # one idle-server request or none: too few to say the model is off
        gap = abs(self.measured_latency_mean_s - self.predicted_latency_s)
        return gap > tolerance * self.predicted_latency_s and gap > 2 * (self.measured_latency_sem_s or 0.0)


class Replanned(BaseModel):
    """The fleet planned again with the chosen plan's service time scaled to its rehearsal's measured latency."""

    capacity: CapacityPlan
    same_fleet: bool
    basis: str


class FleetOutcome(BaseModel):
    """A traffic goal's fleet as the run's record keeps it (agent/fleet_step.py makes it, the CLI and the report
    show it): the capacity plan, its rehearsal on twins (local twins only, else None and a note), the SkyServe
    service, why its plan is not the recommendation's, and the plan made again where the rehearsal disagreed."""

    capacity: CapacityPlan
    rehearsal: FleetRehearsal | None = None
    note: str | None = None
    skyserve_service_yaml: str | None = None
    differs: str | None = Field(default=None, description="why the fleet's plan is not the recommended one")
    replanned: Replanned | None = None

    @model_serializer(mode="wrap")
    def _what_was_said(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """The record's JSON as it has always been: a key only once it has something to say (the rehearsal as null)."""
        data: dict[str, Any] = handler(self)
        return {k: v for k, v in data.items() if v is not None or k in ("capacity", "rehearsal")}


def _node_plan(fleet: Fleet) -> str:
    base = fleet.layout.single_replica()
    return str(base.model_copy(update={"replicas": fleet.servers_per_node}))


def rehearse_fleet(
    fleet: Fleet,
    traffic: Traffic,
    workload: Workload,
    predicted_daily_cost_usd: float,
    requests: int = 40,
    time_scale: float = 300.0,
    store: Store | None = None,
    twin_profile: str | None = None,
    run_id: str | None = None,
) -> FleetRehearsal:
    """Start the fleet's warm nodes as twins, send `requests` open-loop arrivals, tear down; measured vs predicted."""
    store = store or Store()
    nodes = max(1, fleet.autoscaler.min_replicas)
    rate = max(traffic.peak_rate_per_hour, 1e-6)
    started: list[str] = []
    endpoints: list[str] = []
    loads: list[float] = []
    try:
        for _ in range(nodes):
            t0 = time.monotonic()
            request = DeployRequest(
                gpu=fleet.gpu,
                plan=_node_plan(fleet),
                model=workload.model,
                twin_profile=twin_profile,
                time_scale=time_scale,
                run_id=run_id,
                guardrails=workload.guardrails,  # the servers run the guardrails the rehearsed workload asks
            )
            dep = deploy(request, store)
            started.append(dep.id)
            loads.append((time.monotonic() - t0) * time_scale)
            endpoints += dep.endpoints
        spec = BenchmarkSpec(
            endpoints=endpoints,
            workload=workload,
            steps=workload.steps,
            repeats=1,
            concurrency=[1],
            poisson_rate_per_hour=rate,
            poisson_requests=requests,
            probe_steps=[4],
            warmup=0,
            full=False,
            check_video=False,
            expected_latency_s=fleet.latency_s,
            run_id=run_id,
            label="fleet rehearsal",
        )
        bid = new_benchmark_id()
        run_benchmark(spec, store=store, benchmark_id=bid)
        samples = [s.record() for s in store.samples(bid) if s.phase == "poisson"]
    finally:
        for dep_id in started:
            teardown(dep_id, store)
    return _compare(fleet, traffic, nodes, requests, time_scale, samples, loads, predicted_daily_cost_usd, started)


def rehearse_on_first_profile(
    fleet: Fleet,
    traffic: Traffic,
    workload: Workload,
    predicted_daily_cost_usd: float,
    twin_profiles: list[str] | None = None,
    requests: int = 40,
    time_scale: float = 300.0,
    store: Store | None = None,
) -> FleetRehearsal:
    """The fleet rehearsed on twins serving the first of `twin_profiles` the deploy takes for its GPU type (as a
    tuning run's deployments do), else the shipped profile; a profile for another GPU type is refused before
    anything starts, so the next one is tried."""
    for path in [*(twin_profiles or []), None]:
        try:
            return rehearse_fleet(
                fleet,
                traffic,
                workload,
                predicted_daily_cost_usd,
                requests=requests,
                time_scale=time_scale,
                store=store,
                twin_profile=path,
            )
        except InvalidInput as exc:
            if path is None or exc.field != "twin_profile":
                raise
    raise AssertionError("unreachable: the shipped profile (None) either rehearses or raises")


def _compare(
    fleet: Fleet,
    traffic: Traffic,
    nodes: int,
    requests: int,
    scale: float,
    samples: list[dict[str, object]],
    loads: list[float],
    predicted_cost: float,
    deployments: list[str],
) -> FleetRehearsal:
    pct = traffic.e2e_percentile
    ok = [s for s in samples if s.get("ok")]
    lat = np.asarray([float(str(s["latency_s"])) for s in ok])
    waits = np.asarray([float(str(s["latency_s"])) - float(str(s.get("server_time_s") or 0.0)) for s in ok])
    # a request sent to an idle server: its server time is the plan's own latency (no queue in it)
    own = np.asarray(
        [float(str(s["server_time_s"])) for s in ok if s.get("server_time_s") is not None and s.get("queue_ahead") == 0]
    )
    fixed = fleet.model_copy(
        update={
            "autoscaler": Autoscaler(policy="fixed", min_replicas=nodes, max_replicas=nodes),
            "preemptions_per_node_hour": 0.0,
            "capacity": "on-demand",
        }
    )
    arrivals = Traffic(shape="poisson", rate_per_hour=traffic.peak_rate_per_hour).arrivals(seed=17)
    predicted = simulate_day(fixed, arrivals, seed=17)
    measured_p = float(np.percentile(lat, pct)) if lat.size else None
    bound = traffic.e2e_bound_s
    return FleetRehearsal(
        nodes=nodes,
        servers=nodes * fleet.servers_per_node,
        requests=requests,
        answered=len(ok),
        time_scale=scale,
        percentile=pct,
        measured_p_s=measured_p,
        predicted_p_s=predicted.percentile(pct),
        measured_p50_s=float(np.percentile(lat, 50)) if lat.size else None,
        predicted_p50_s=predicted.percentile(50),
        measured_wait_mean_s=float(waits.mean()) if waits.size else None,
        predicted_wait_mean_s=predicted.wait_mean_s,
        measured_cold_start_s=max(loads) if loads else None,
        measured_latency_mean_s=float(own.mean()) if own.size else None,
        measured_latency_sem_s=float(own.std(ddof=1) / np.sqrt(own.size)) if own.size > 1 else None,
        predicted_latency_s=fleet.latency_s,
        measured_daily_cost_usd=nodes * fleet.usd_per_node_hour * 24,
        predicted_daily_cost_usd=predicted_cost,
        meets=None if measured_p is None or bound is None else (measured_p <= bound and len(ok) == requests),
        deployments=deployments,
    )
