"""Plans for a GPU count with their Pareto frontier and the cheapest meeting a latency bound or throughput floor.

A plain capability over the words (Workload, Goal, Estimate): the MCP tool list_plans is a thin wrapper over
`plan_frontier`, and anything else (a script, a test) can call it without an MCP client. Free: nothing starts.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, Field

from worldtune.tools.words.plan import PlanField
from worldtune.tools.words.prediction import Estimate

SortKey = Literal["latency", "cost", "throughput"]

SORT_KEYS: dict[str, Callable[[Estimate], float]] = {
    "latency": lambda e: e.latency_s or math.inf,
    "cost": lambda e: e.usd_per_clip if e.usd_per_clip is not None else math.inf,
    "throughput": lambda e: -(e.clips_per_hour_per_node or 0.0),
}


class PlanList(BaseModel):
    """The valid plans for a GPU count (sorted), the Pareto frontier, and which meet the given constraints."""

    model: str
    gpu: str
    gpus: int
    goal: str = Field(description="the constraints applied, in words ('' for none)")
    valid_count: int
    refused_count: int
    meeting_goal_count: int
    frontier: list[PlanField] = Field(description="plans on the latency / $ per clip / throughput Pareto frontier")
    best: PlanField | None = Field(description="the cheapest plan per clip that meets the constraints")
    plans: list[Estimate] = Field(description="plans shown (frontier only if asked), sorted by `sort`, up to limit")
    refused_examples: dict[str, str] = Field(description="one refused plan per rule, with its reason")


def plan_frontier(
    model: str = "cosmos3-super",
    gpu: str = "H200",
    gpus: int = 8,
    steps: int | None = None,
    capacity: str = "on-demand",
    profile_path: str | None = None,
    latency_bound_s: float | None = None,
    throughput_floor: float | None = None,
    frontier_only: bool = False,
    sort: SortKey = "cost",
    limit: int = 20,
) -> PlanList:
    """Every plan vLLM-Omni would accept on `gpus` GPUs of one node, predicted, filtered by the constraints,
    with the Pareto frontier of those meeting them and the cheapest per clip (refused plans: one per rule)."""
    from worldtune.policies.pareto import goal_violations, pareto_frontier
    from worldtune.tools.plans.estimate import list_plans as all_plans
    from worldtune.tools.words.goal import Goal
    from worldtune.tools.words.gpus import get_gpu
    from worldtune.tools.words.workload import anchor_workload

    spec = get_gpu(gpu)
    workload = anchor_workload(model) if steps is None else anchor_workload(model, steps=steps)
    goal = Goal(
        objective="min_cost_per_clip",
        workload=workload,
        latency_bound_s=latency_bound_s,
        throughput_floor_clips_per_hour=throughput_floor,
        gpus=[spec.name],
        capacities=[capacity],
    )
    found = all_plans(
        model=model,
        gpu=spec.name,
        gpus=gpus,
        steps=steps,
        profile_path=profile_path,
        capacity=capacity,
        workload=workload,
    )
    valid = [e for e in found if e.valid]
    refused = [e for e in found if not e.valid]
    meeting = [e for e in valid if not goal_violations(e, goal)]
    frontier = pareto_frontier(meeting)
    shown = sorted(frontier if frontier_only else meeting, key=SORT_KEYS[sort])[:limit]
    best = min(meeting, key=SORT_KEYS["cost"], default=None)
    examples: dict[str, str] = {}
    for e in refused:
        examples.setdefault(e.rule, f"{e.plan}: {e.reason}")
    constrained = latency_bound_s is not None or throughput_floor is not None
    return PlanList(
        model=workload.model,
        gpu=spec.name,
        gpus=gpus,
        goal=goal.describe() if constrained else "",
        valid_count=len(valid),
        refused_count=len(refused),
        meeting_goal_count=len(meeting),
        frontier=[e.plan for e in frontier],
        best=best.plan if best else None,
        plans=shown,
        refused_examples=examples,
    )
