"""Replan: keep the node, change the plan (the capability behind `replan_deployment` in MCP).

Public API:

    check_replan(deployment_id, plan, store=None) -> ReplanCheck        # checks, stops nothing
    replan(deployment_id, plan, store=None, progress=None, backend=None, hours=None) -> Deployment

A replan stops the engine of a live deployment and starts it again under another plan on the node(s) it
already holds: locally the twin processes are restarted, on SkyPilot the serve job is cancelled and a new
one submitted on the same cluster (no new `sky launch`), on Kubernetes the pods roll on the same node
pool. The deployment keeps its id, owner, ledger row and commitment (nothing new is rented, so the budget
guardrails have nothing new to count); the load is warm: the weights are already in the node's page cache.
With `hours`, the deployment is kept that many hours after the new plan is ready instead (what the caller
pays for the next measurement): the extension (price x (warm load + hours), on top of what it has billed)
is checked against the guardrails like a new deployment before anything stops, and on SkyPilot the
cluster's hard autodown is set to it.
Input is refused before anything stops: an unknown or dead deployment, a plan vLLM-Omni would refuse on
that GPU, or a plan that needs more GPUs than the node has (field, value and what would be valid).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from worldtune.policies import perf_model
from worldtune.tools.plans.estimate import estimate_plan, resolve_profile
from worldtune.tools.store.database import Store
from worldtune.tools.words.deployment import Backend, Deployment, Progress, node_gpu_count, replan_target
from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.models import get_model
from worldtune.tools.words.workload import anchor_workload


class ReplanCheck(BaseModel):
    """What a replan would do: from which plan to which, on how many GPUs, and the load it would pay."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    deployment_id: str
    from_plan: str
    to_plan: str
    node_gpus: int
    plan_gpus: int
    warm_load_s: float = Field(description="modelled: the new plan's load with the weights in page cache")
    cold_load_s: float = Field(description="modelled: what a new deployment of the new plan would load (from disk)")
    basis: str = "modelled by the performance model's load terms (policies/profiles/*.yaml basis: load_*)"
    hours: float | None = Field(default=None, description="the new lease asked for (null: the deployment's own)")
    extension_usd: float | None = Field(default=None, description="price x (warm load + hours): what it commits")
    committed_usd: float | None = Field(default=None, description="the deployment's commitment after it")


def _find(deployment_id: str, store: Store) -> Deployment:
    found = store.get_deployment(deployment_id)
    if found is None:
        raise InvalidInput("deployment_id", deployment_id, "an id returned by deploy")
    return found


def check_replan(deployment_id: str, plan: str, store: Store | None = None, hours: float | None = None) -> ReplanCheck:
    """Refuse a replan that cannot happen (or, with `hours`, whose new lease the guardrails do not allow),
    before anything stops; else say what it would do."""
    store = store or Store()
    current = _find(deployment_id, store)
    new = replan_target(current, plan)
    gpus = node_gpu_count(current)
    profile = resolve_profile(current.gpu)
    verdict = estimate_plan(anchor_workload(current.model), current.gpu, new, profile, node_gpus=gpus)
    if not verdict.valid:
        hint = f"try {verdict.alternative}" if verdict.alternative else None
        raise InvalidInput("plan", plan, verdict.reason or "a plan vLLM-Omni accepts", hint)
    spec = get_model(current.model)
    warm_load_s = perf_model.load_time_s(spec, profile, cold=False, plan=new)
    lease: dict[str, float] = {}
    if hours is not None:  # a new lease: bound like a new commitment
        from worldtune.tools.plans import spend

        quoted = spend.extension(current, hours, warm_load_s)
        committed = spend.check_extension(quoted, current, store.list_deployments())
        lease = {
            "hours": quoted.hold_hours,
            "extension_usd": round(quoted.expected_usd, 4),
            "committed_usd": round(committed, 4),
        }
    return ReplanCheck(
        deployment_id=current.id,
        from_plan=str(current.plan),
        to_plan=str(new),
        node_gpus=gpus,
        plan_gpus=new.gpus,
        warm_load_s=warm_load_s,
        cold_load_s=perf_model.load_time_s(spec, profile, cold=True, plan=new),
        **lease,
    )


def replan(
    deployment_id: str,
    plan: str,
    store: Store | None = None,
    progress: Progress | None = None,
    backend: Backend | None = None,
    hours: float | None = None,
) -> Deployment:
    """Restart deployment `deployment_id` under `plan` on the node(s) it holds; return it once ready (or raise).

    A replan that fails leaves the node to the usual teardown rules: the deployment is torn down through
    its backend and recorded failed, so nothing stays up unnoticed.
    """
    from worldtune.tools.deployments.deploy import backend_for, tear_down_failed_start

    store = store or Store()
    check = check_replan(deployment_id, plan, store, hours)
    current = _find(deployment_id, store)
    if check.hours is not None and check.committed_usd is not None:  # the new lease, checked above
        current = current.model_copy(update={"hold_hours": check.hours, "committed_usd": check.committed_usd})
    host = backend or backend_for(current.infra, store)
    try:
        ready = host.replan(current, check.to_plan, progress)
    except Exception:
        tear_down_failed_start(store, host, current)
        raise
    store.save_deployment(ready)
    return ready
