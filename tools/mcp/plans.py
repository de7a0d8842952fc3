"""The MCP tools over plans and predictions: validate_plan, estimate, list_plans (free, offline)."""

from __future__ import annotations

from typing import Annotated, Literal

from mcp.server.mcpserver import Context
from pydantic import Field

from worldtune.tools.mcp.common import (
    READ_ONLY,
    CapacityArg,
    GpuArg,
    ModelArg,
    PlanArg,
    ProfileArg,
    StepsArg,
    allowed_profile,
    refusals,
    tool,
)
from worldtune.tools.mcp.session import session_of
from worldtune.tools.plans.estimate import Estimate, PlanCheck
from worldtune.tools.plans.frontier import PlanList


@tool("Validate a parallelism plan", READ_ONLY)
def validate_plan(
    ctx: Context,
    plan: PlanArg,
    model: ModelArg = "cosmos3-super",
    gpu: GpuArg = "H200",
    gpus: Annotated[int | None, Field(ge=1, le=8, description="GPUs of the node (default: a full node)")] = None,
    steps: StepsArg = None,
    profile: ProfileArg = None,
) -> PlanCheck:
    """Check a plan against vLLM-Omni 0.30's rules for Cosmos 3 and the GPU's memory.

    A refused plan is an answer, not an error: `valid` is false, `message` says which rule it
    breaks with the values, and `alternative` names a nearby plan that is valid.
    """
    session = session_of(ctx)
    from worldtune.tools.plans.estimate import validate

    with refusals():
        return validate(plan, model, gpu, gpus, steps, allowed_profile(session, profile))


@tool("Estimate one plan", READ_ONLY)
def estimate(
    ctx: Context,
    plan: PlanArg,
    model: ModelArg = "cosmos3-super",
    gpu: GpuArg = "H200",
    steps: StepsArg = None,
    capacity: CapacityArg = "on-demand",
    profile: ProfileArg = None,
) -> Estimate:
    """Predict one plan on the anchor workload (720p, 189 frames): latency per clip, per-step and fixed time,
    memory per GPU, clips per hour and cost per clip on the cheapest matching offer.

    A plan vLLM-Omni would refuse comes back with valid=false and the rule's reason.
    """
    session = session_of(ctx)
    from worldtune.tools.plans.estimate import estimate as predict

    with refusals():
        path = allowed_profile(session, profile)
        return predict(model=model, gpu=gpu, plan=plan, steps=steps, profile_path=path, capacity=capacity)


@tool("List plans and their Pareto frontier", READ_ONLY)
def list_plans(
    ctx: Context,
    model: ModelArg = "cosmos3-super",
    gpu: GpuArg = "H200",
    gpus: Annotated[int, Field(ge=1, le=8, description="GPUs on the node the plans must use")] = 8,
    steps: StepsArg = None,
    capacity: CapacityArg = "on-demand",
    profile: ProfileArg = None,
    latency_bound_s: Annotated[
        float | None, Field(gt=0, description="keep plans whose predicted latency per clip is at most this")
    ] = None,
    throughput_floor: Annotated[
        float | None, Field(gt=0, description="keep plans that make at least this many clips per hour per node")
    ] = None,
    frontier_only: Annotated[bool, Field(description="show only the Pareto frontier")] = False,
    sort: Annotated[Literal["latency", "cost", "throughput"], Field(description="order of `plans`")] = "cost",
    limit: Annotated[int, Field(ge=1, le=500, description="most plans returned")] = 20,
) -> PlanList:
    """Every plan vLLM-Omni would accept on GPUS GPUs of one node, with predictions, the Pareto frontier
    (latency vs cost per clip vs throughput) and the cheapest plan meeting an optional latency bound or
    throughput floor. Free: nothing is started.
    """
    session = session_of(ctx)
    from worldtune.tools.plans.frontier import plan_frontier

    with refusals():
        path = allowed_profile(session, profile)
        return plan_frontier(
            model=model,
            gpu=gpu,
            gpus=gpus,
            steps=steps,
            capacity=capacity,
            profile_path=path,
            latency_bound_s=latency_bound_s,
            throughput_floor=throughput_floor,
            frontier_only=frontier_only,
            sort=sort,
            limit=limit,
        )
