"""plan_capacity: the cheapest fleet for a day of traffic under an end-to-end percentile bound.

Searches plan x offer x capacity x replica range x autoscaler settings. Every figure is a simulation
(policies/fleet_sim.py) over the performance model's service times (tools/plans/estimate.py) and the offer
snapshot's prices, at a stated spot preemption rate; nothing here is measured. The chosen fleet must meet
the bound on several simulated days at the model's mean service time and at its pessimistic one (the
95th percentile of the model's latency under the profile's prior uncertainty).
"""

from __future__ import annotations

import math

from pydantic import BaseModel, Field

from worldtune.policies.fleet_sim import simulate_day
from worldtune.tools.plans.estimate import Estimate, list_plans
from worldtune.tools.plans.offers import cheapest_fitting_offer
from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.fleet import Autoscaler, Fleet, FleetDay
from worldtune.tools.words.goal import Goal
from worldtune.tools.words.gpus import get_gpu
from worldtune.tools.words.plan import Plan
from worldtune.tools.words.traffic import Traffic

NODE_SIZES = (1, 2, 4, 8)
PLANS_PER_SIZE = 2  # the cheapest-per-clip plans of each node size, plus the fastest
CONFIRM_SEEDS = (1, 2, 3)
CONFIRM_MAX = 30  # first-pass fleets confirmed on more days, cheapest first, before giving up
DEFAULT_PREEMPTIONS_PER_NODE_HOUR = 0.1  # assumed: about one preemption per node every 10 hours
BASIS = (
    "simulated: one day per seed in a discrete-event model (policies/fleet_sim.py); service times from the "
    "performance model (predicted, not measured); prices from the offer snapshot; spot preemptions at an "
    "assumed rate; cold start = the offer's provisioning time + the model's load time"
)


class FleetChoice(BaseModel):
    """One fleet the search simulated, with its predicted day."""

    fleet: Fleet
    day: FleetDay = Field(description="the simulated day (seed 0; the timeline kept only for the chosen fleet)")
    daily_cost_usd: float = Field(description="mean simulated cost of a day over the seeds it was run")
    p_e2e_s: float = Field(description="the bound's percentile end to end, over every simulated day pooled")
    p_e2e_pessimistic_s: float | None = Field(default=None, description="same at the model's pessimistic latency")
    meets: bool
    why: str = ""


class CapacityPlan(BaseModel):
    """The cheapest fleet found, what else was close, and what the figures rest on."""

    basis: str = BASIS
    traffic: Traffic
    percentile: int
    bound_s: float | None
    chosen: FleetChoice | None
    runners_up: list[FleetChoice] = Field(default_factory=list)
    skyserve_default: FleetChoice | None = Field(default=None, description="the chosen plan under SkyServe defaults")
    simulated_fleets: int = Field(description="fleets simulated (others skipped: their floor cost was beaten)")
    candidate_fleets: int = 0
    assumptions: list[str] = Field(default_factory=list)


def _plans(goal: Goal, gpu: str, profile_path: str | None) -> list[Estimate]:
    """A few plans per node size: cheapest per clip and fastest, each fitting one clip in the bound."""
    chosen: dict[Plan, Estimate] = {}
    bound = goal.traffic.e2e_bound_s if goal.traffic else None
    for size in NODE_SIZES:
        if size > min(goal.max_gpus_per_node, get_gpu(gpu).max_gpus_per_node):
            continue
        valid = [
            e
            for e in list_plans(
                gpu=gpu, gpus=size, profile_path=profile_path, include_invalid=False, workload=goal.workload
            )
            if e.latency_s and e.service_s
        ]
        valid = [e for e in valid if bound is None or (e.latency_s or math.inf) < bound]
        # FP8 changes what the clips look like: a fleet uses it only when the goal allows it, as the search does
        valid = [e for e in valid if goal.allow_fp8 or not e.plan.fp8]
        picks = sorted(valid, key=lambda e: e.usd_per_clip or math.inf)[:PLANS_PER_SIZE]
        picks += sorted(valid, key=lambda e: e.latency_s or math.inf)[:1]
        chosen |= {e.plan: e for e in picks}
    return list(chosen.values())


def _autoscalers(stable: int, servers: int, service_s: float) -> list[Autoscaler]:
    """Fixed fleets around the stable size, worldtune's queue rule, and SkyServe's QPS rule at its delays."""
    top = stable + 2
    node_qps = servers / service_s
    out = [Autoscaler(policy="fixed", min_replicas=n, max_replicas=n) for n in range(max(1, stable), top + 1)]
    for low in sorted({0, 1, stable}):
        for per in (1.0, 2.0):
            out.append(
                Autoscaler(
                    policy="queue",
                    min_replicas=low,
                    max_replicas=max(top, 1),
                    target_queue_per_server=per,
                    upscale_delay_s=20.0,
                )
            )
        out.append(
            Autoscaler(
                policy="qps",
                min_replicas=low,
                max_replicas=max(top, 1),
                target_qps_per_replica=round(0.7 * node_qps, 6),
            )
        )
    return out


def _measured(est: Estimate, measured: dict[tuple[str, str], float] | None) -> Estimate:
    """The estimate with its service and latency scaled to a measured mean latency of the same (GPU, plan)."""
    seconds = (measured or {}).get((est.gpu, str(est.plan)))
    if seconds is None or not est.latency_s or not est.service_s:
        return est
    ratio = seconds / est.latency_s
    return est.model_copy(update={"latency_s": seconds, "service_s": est.service_s * ratio})


def _fleets(goal: Goal, est: Estimate, preempt: float) -> list[Fleet]:
    traffic = goal.traffic
    assert traffic is not None and est.service_s and est.latency_s
    plan_replicas = est.replicas
    out: list[Fleet] = []
    for capacity in [c for c in goal.capacities if c in ("on-demand", "spot")]:
        offer = cheapest_fitting_offer(est.gpu, est.gpus, capacity=[capacity])
        if offer is None:
            continue
        demand = cheapest_fitting_offer(est.gpu, est.gpus, capacity=["on-demand"])
        servers = plan_replicas * max(1, offer.gpu_count // est.gpus)  # a bigger node runs more replicas
        load = traffic.peak_rate_per_hour * est.service_s / 3600
        stable = max(1, math.ceil(load / 0.85 / servers))
        common = dict(
            plan=str(est.plan),
            gpu=est.gpu,
            offer_id=offer.id,
            capacity=capacity,
            servers_per_node=servers,
            service_s=est.service_s,
            latency_s=est.latency_s,
            service_cv=0.02,
            provision_s=offer.provision_s,
            load_s=est.load_s or 0.0,
            usd_per_node_hour=offer.usd_per_hour,
            ondemand_usd_per_node_hour=demand.usd_per_hour if demand else None,
        )
        for auto in _autoscalers(stable, servers, est.service_s):
            for fallback in (0, 1) if capacity == "spot" else (0,):
                spot = {"base_ondemand_fallback": fallback, "preemptions_per_node_hour": preempt}
                out.append(Fleet.model_validate({**common, "autoscaler": auto, **(spot if capacity == "spot" else {})}))
    return out


def judge_fleet(fleet: Fleet, traffic: Traffic, seeds: tuple[int, ...], pct: int, bound: float | None) -> FleetChoice:
    """`fleet` simulated on each seed's day: the pooled percentile, the mean daily cost, whether it meets the bound."""
    days = [simulate_day(fleet, traffic.arrivals(seed=s), seed=s) for s in seeds]
    pooled = sorted(e for d in days for e in d.e2e_samples_s)
    p = pooled[min(len(pooled) - 1, math.ceil(pct / 100 * len(pooled)) - 1)] if pooled else math.inf
    complete = all(d.completed == d.arrivals for d in days)
    meets = complete and (bound is None or p <= bound)
    why = "" if meets else ("requests left unanswered" if not complete else f"p{pct} {p:.0f} s > {bound:g} s")
    cost = sum(d.cost_usd for d in days) / len(days)
    first = days[0].model_copy(update={"timeline": [], "answers": []})
    return FleetChoice(fleet=fleet, day=first, daily_cost_usd=cost, p_e2e_s=p, meets=meets, why=why)


def plan_capacity(
    goal: Goal,
    profile_path: str | None = None,
    preemptions_per_node_hour: float = DEFAULT_PREEMPTIONS_PER_NODE_HOUR,
    measured_latency_s: dict[tuple[str, str], float] | None = None,
    profile_paths: dict[str, str] | None = None,
) -> CapacityPlan:
    """The cheapest fleet whose simulated days meet the goal's end-to-end bound (see the module's basis).
    `measured_latency_s` maps (GPU, plan) to a measured mean latency per request (a rehearsal's): that plan's
    service times are scaled to it; every other plan keeps the model's. `profile_paths` maps a GPU type to the
    profile to predict it with (a tuning run's recalibrated one), else `profile_path`, else the shipped one."""
    paths = {g: p for g in goal.gpus if (p := (profile_paths or {}).get(g, profile_path))}
    traffic = goal.traffic
    if traffic is None:
        raise InvalidInput("traffic", None, "arrivals to plan for, e.g. Traffic(shape='poisson', rate_per_hour=40)")
    if not 0 <= preemptions_per_node_hour <= 10:
        raise InvalidInput("preemptions_per_node_hour", preemptions_per_node_hour, "a rate from 0 to 10 per node-hour")
    pct, bound = traffic.e2e_percentile, traffic.e2e_bound_s
    fleets = [
        f
        for gpu in goal.gpus
        for e in _plans(goal, gpu, paths.get(gpu))
        for f in _fleets(goal, _measured(e, measured_latency_s), preemptions_per_node_hour)
    ]
    if not fleets:
        raise InvalidInput("goal", goal.describe(), "a goal some plan can serve: one clip must fit the bound")
    first = sorted(_first_pass(fleets, traffic, pct, bound), key=lambda c: (not c.meets, c.daily_cost_usd))
    chosen = _confirm(first, goal, paths, traffic)
    if chosen is None:  # every near-tie failed on more days: simulate what the first pass skipped, and go on
        seen = {c.fleet for c in first}
        first += sorted(
            _first_pass([f for f in fleets if f not in seen], traffic, pct, bound, prune=False),
            key=lambda c: (not c.meets, c.daily_cost_usd),
        )
        chosen = _confirm(first, goal, paths, traffic)
    skyserve = _skyserve_default(chosen.fleet, traffic, pct, bound) if chosen else None
    return CapacityPlan(
        traffic=traffic,
        percentile=pct,
        bound_s=bound,
        chosen=chosen,
        skyserve_default=skyserve,
        runners_up=[c for c in first if c.meets and (chosen is None or c.fleet != chosen.fleet)][:5],
        simulated_fleets=len(first),
        candidate_fleets=len(fleets),
        assumptions=[
            f"spot preemptions: {preemptions_per_node_hour:g} per node-hour (assumed), the replacement a cold start",
            "per-request service spread 2% (lognormal, assumed); noise beyond it is the model's prior uncertainty",
            "the day starts with min_replicas nodes warm; nodes are billed from launch to teardown",
            "serverless capacity is not modelled; a 2-GPU plan rents the smallest node that fits and runs more "
            "replicas on it",
            *[f"{gpu}: service times predicted with {path}" for gpu, path in sorted(paths.items())],
            *[
                f"{gpu} {plan}: service time scaled to the measured mean latency {sec:.1f} s (the rehearsal's)"
                for (gpu, plan), sec in sorted((measured_latency_s or {}).items())
            ],
        ],
    )


def _confirm(first: list[FleetChoice], goal: Goal, paths: dict[str, str], traffic: Traffic) -> FleetChoice | None:
    """The cheapest first-pass fleet that meets the bound on more seeded days and at the pessimistic latency."""
    pct, bound = traffic.e2e_percentile, traffic.e2e_bound_s
    for cand in sorted((c for c in first if c.meets), key=lambda c: c.daily_cost_usd)[:CONFIRM_MAX]:
        cand = judge_fleet(cand.fleet, traffic, (0, *CONFIRM_SEEDS), pct, bound)
        if not cand.meets:
            continue
        worst = judge_fleet(
            _pessimistic(cand.fleet, goal, paths.get(cand.fleet.gpu)), traffic, (0, *CONFIRM_SEEDS), pct, bound
        )
        if worst.meets:
            kept = simulate_day(cand.fleet, traffic.arrivals(seed=0), seed=0)
            day = cand.day.model_copy(update={"timeline": kept.timeline, "answers": kept.answers})
            return cand.model_copy(update={"p_e2e_pessimistic_s": worst.p_e2e_s, "day": day})
    return None


def _floor_usd(fleet: Fleet) -> float:
    """No day of this fleet costs less: its minimum nodes all day at the cheaper of its prices."""
    prices = [fleet.usd_per_node_hour, fleet.ondemand_usd_per_node_hour or fleet.usd_per_node_hour]
    return fleet.autoscaler.min_replicas * 24 * min(prices)


def _first_pass(
    fleets: list[Fleet], traffic: Traffic, pct: int, bound: float | None, prune: bool = True
) -> list[FleetChoice]:
    """One simulated day each, cheapest floor first; a fleet whose floor beats no fleet that meets is skipped."""
    out: list[FleetChoice] = []
    best = math.inf
    for fleet in sorted(fleets, key=_floor_usd):
        if prune and _floor_usd(fleet) > best:
            continue
        choice = judge_fleet(fleet, traffic, (0,), pct, bound)
        out.append(choice)
        if choice.meets:
            best = min(best, choice.daily_cost_usd * 1.25)  # keep near-ties: the confirming seeds may reorder them
    return out


def _pessimistic(fleet: Fleet, goal: Goal, profile_path: str | None) -> Fleet:
    """The fleet at the model's 95th-percentile latency (its prior uncertainty), service scaled alike."""
    from worldtune.tools.plans.estimate import estimate_plan, resolve_profile

    est = estimate_plan(goal.workload, fleet.gpu, fleet.layout, resolve_profile(fleet.gpu, profile_path))
    scale = est.latency_range_s[1] / est.latency_s if est.latency_range_s and est.latency_s else 1.0
    return fleet.model_copy(update={"service_s": fleet.service_s * scale, "latency_s": (fleet.latency_s or 0) * scale})


def _skyserve_default(fleet: Fleet, traffic: Traffic, pct: int, bound: float | None) -> FleetChoice:
    """The chosen plan and offer under SkyServe's default autoscaling: min 1, its delays, target QPS of one node."""
    auto = Autoscaler(
        policy="qps",
        min_replicas=1,
        max_replicas=max(fleet.autoscaler.max_replicas, 2),
        target_qps_per_replica=round(fleet.servers_per_node / fleet.service_s, 6),
    )
    return judge_fleet(fleet.model_copy(update={"autoscaler": auto}), traffic, (0, *CONFIRM_SEEDS), pct, bound)


def skyserve_service_yaml(fleet: Fleet, model: str = "cosmos3-super") -> str:
    """The fleet as a SkyServe service YAML (sky/fleet_service.py: the replica policy from the plan, its gaps)."""
    import yaml

    from worldtune.sky.fleet_service import render_fleet_service
    from worldtune.sky.replicas import RenderOptions
    from worldtune.tools.deployments.preview import predicted_cold_load_s

    options = RenderOptions(cold_load_s=predicted_cold_load_s(fleet.gpu, model))  # the readiness probe's delay
    return yaml.safe_dump(render_fleet_service(fleet, model=model, options=options), sort_keys=False)
