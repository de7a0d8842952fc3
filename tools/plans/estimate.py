"""Estimate and plans: what the performance model predicts for a plan, and every plan for a GPU count.

Plain typed functions with pydantic outputs; the CLI and the MCP server are thin wrappers over them.
"""

from __future__ import annotations

from worldtune.policies import perf_model
from worldtune.policies.calibration import shipped_profile, unmeasured_families
from worldtune.policies.uncertainty import uncertainty
from worldtune.tools.plans.offers import cheapest_fitting_offer
from worldtune.tools.plans.profile_paths import load_profile
from worldtune.tools.words import plan_rules
from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.gpus import get_gpu
from worldtune.tools.words.plan import Plan
from worldtune.tools.words.prediction import Breakdown, Estimate, PlanCheck
from worldtune.tools.words.profile import Profile
from worldtune.tools.words.workload import Workload, anchor_workload

__all__ = [
    "Breakdown",
    "Estimate",
    "PlanCheck",
    "check_plan",
    "estimate",
    "estimate_plan",
    "list_plans",
    "resolve_profile",
    "validate",
]


def resolve_profile(gpu: str, profile_path: str | None = None) -> Profile:
    """The profile to predict with: the given file, else the calibrated one shipped for the GPU."""
    if profile_path:
        profile = load_profile(profile_path, "cli")  # MCP callers pass a path their origin was allowed
        if profile.gpu.lower() != get_gpu(gpu).name.lower():
            raise InvalidInput("profile", profile_path, f"a profile for {gpu}", f"it is for {profile.gpu}")
        return profile
    return shipped_profile(gpu)


def check_plan(
    workload: Workload,
    gpu: str,
    plan: Plan,
    profile: Profile,
    node_gpus: int | None = None,
    pool: list[Plan] | None = None,
) -> PlanCheck:
    """Whether vLLM-Omni would take `plan` for `workload` on `gpu` (rules and memory), and its serve flags."""
    spec = get_gpu(gpu)
    verdict = plan_rules.check(plan, workload, spec, profile, node_gpus, pool=pool)
    return PlanCheck(
        valid=verdict.valid,
        plan=plan,
        model=workload.model,
        gpu=spec.name,
        rule=verdict.rule,
        message=verdict.message,
        alternative=verdict.alternative,
        gpus=plan.gpus,
        world_size=plan.world_size,
        replicas=plan.replicas,
        serve_flags=plan.serve_flags() if verdict.valid else [],
    )


def estimate_plan(
    workload: Workload,
    gpu: str,
    plan: Plan,
    profile: Profile,
    capacities: list[str] | None = None,
    node_gpus: int | None = None,
    pool: list[Plan] | None = None,
) -> Estimate:
    """Validate `plan` and, if valid, predict latency, throughput, memory and cost per clip."""
    check = check_plan(workload, gpu, plan, profile, node_gpus, pool)
    shared = check.model_dump(
        include={"valid", "rule", "alternative", "model", "gpu", "gpus", "world_size", "replicas"}
    )
    base = Estimate(**shared, plan=plan, reason=check.message, steps=workload.steps, profile_source=profile.source)
    if not check.valid:
        return base
    p = perf_model.predict(workload, plan, profile)
    spread = uncertainty(profile, workload, plan)
    # one node's price buys its clips/h whichever offer it is, so the cheapest node is the cheapest clip
    offer = cheapest_fitting_offer(check.gpu, plan.gpus, capacity=capacities or ["on-demand"])
    return base.model_copy(
        update={
            "latency_s": p.latency_s,
            "server_s": p.server_s,
            "client_s": p.latency_s,
            "client_overhead_s": p.client_overhead_s,
            "per_step_s": p.per_step_s,
            "fixed_s": p.fixed_s,
            "guardrail_s": p.guardrail_s,
            "service_s": p.service_s,
            "load_s": p.load_s,
            "memory_gib_per_gpu": p.memory_gib_per_gpu,
            "clips_per_hour_per_replica": p.clips_per_hour_per_replica,
            "clips_per_hour_per_node": p.clips_per_hour_per_node,
            "usd_per_clip": offer.usd_per_clip(p.clips_per_hour_per_node) if offer else None,
            "offer": offer,
            "breakdown": p.step,
            "latency_sigma": spread.sigma,
            "latency_range_s": (spread.low_s, spread.high_s),
            "uncertainty_shares": spread.shares,
            "assumed_terms": spread.assumed,
            "relies_on_assumed": spread.relies_on_assumed,
            "unmeasured_families": unmeasured_families(check.gpu, plan),
        }
    )


def _workload(model: str, steps: int | None, workload: Workload | None = None) -> Workload:
    wl = workload or anchor_workload(model)
    return wl if steps is None else wl.with_changes(steps=steps)


def estimate(
    model: str = "cosmos3-super",
    gpu: str = "H200",
    plan: str | Plan = "cfg2-u4-hsdp8",
    steps: int | None = None,
    profile_path: str | None = None,
    capacity: str = "on-demand",
    workload: Workload | None = None,
) -> Estimate:
    """Predict one plan on the anchor workload (or the given one) with the calibrated (or given) profile.

    With `validate`, the entry the CLI's and MCP's plan strings come in by: they are read into a Plan here, once."""
    return estimate_plan(
        _workload(model, steps, workload), gpu, Plan.parse(plan), resolve_profile(gpu, profile_path), [capacity]
    )


def validate(
    plan: str | Plan,
    model: str = "cosmos3-super",
    gpu: str = "H200",
    node_gpus: int | None = None,
    steps: int | None = None,
    profile_path: str | None = None,
) -> PlanCheck:
    """Whether vLLM-Omni would take the plan for the anchor workload on the GPU (check_plan, from a plan string)."""
    spec = get_gpu(gpu)
    workload = _workload(model, steps)
    truth = resolve_profile(spec.name, profile_path)
    return check_plan(workload, spec.name, Plan.parse(plan), truth, node_gpus)


def list_plans(
    model: str = "cosmos3-super",
    gpu: str = "H200",
    gpus: int = 8,
    steps: int | None = None,
    profile_path: str | None = None,
    capacity: str = "on-demand",
    include_invalid: bool = True,
    workload: Workload | None = None,
) -> list[Estimate]:
    """Every plan that uses exactly `gpus` GPUs of one node, valid ones first, fastest first."""
    spec = get_gpu(gpu)
    if gpus < 1 or gpus > spec.max_gpus_per_node:
        raise InvalidInput("gpus", gpus, f"1 to {spec.max_gpus_per_node} GPUs of one {spec.name} node")
    wl = workload or anchor_workload(model)
    if steps is not None:
        wl = wl.with_changes(steps=steps)
    profile = resolve_profile(gpu, profile_path)
    candidates = list(plan_rules.candidate_plans(gpus, spec.max_gpus_per_node))
    pool = [p for p in candidates if plan_rules.check(p, wl, spec, profile, gpus, suggest=False).valid]
    found = [estimate_plan(wl, spec.name, p, profile, [capacity], node_gpus=gpus, pool=pool) for p in candidates]
    if not include_invalid:
        found = [e for e in found if e.valid]
    return sorted(found, key=lambda e: (not e.valid, e.latency_s or 0.0, str(e.plan)))
