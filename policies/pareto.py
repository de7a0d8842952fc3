"""Pareto frontier of plans (latency vs cost per clip vs throughput) and whether one meets a Goal.

Pure functions over any items that carry the keys as attributes (an Estimate, a candidate) or as
mapping entries (a dict from JSON). The agent's search and the MCP `list_plans` tool share them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar

if TYPE_CHECKING:
    from worldtune.tools.words.goal import Goal
    from worldtune.tools.words.prediction import Estimate

Direction = Literal["min", "max"]
T = TypeVar("T")

# The three axes a person trades off when choosing a plan.
DEFAULT_KEYS: Mapping[str, Direction] = {
    "latency_s": "min",
    "usd_per_clip": "min",
    "clips_per_hour_per_node": "max",
}


def _value(item: Any, key: str) -> float | None:
    raw = item.get(key) if isinstance(item, Mapping) else getattr(item, key, None)
    return None if raw is None else float(raw)


def _scores(item: Any, keys: Mapping[str, Direction]) -> tuple[float, ...] | None:
    """The item's values turned so that smaller is better on every key; None when one is missing."""
    out: list[float] = []
    for key, direction in keys.items():
        value = _value(item, key)
        if value is None or value != value:  # missing or NaN: not comparable
            return None
        out.append(value if direction == "min" else -value)
    return tuple(out)


def dominates(a: Sequence[float], b: Sequence[float]) -> bool:
    """a is no worse than b on every score and strictly better on one (scores: smaller is better)."""
    return all(x <= y for x, y in zip(a, b, strict=True)) and any(x < y for x, y in zip(a, b, strict=True))


def pareto_frontier(items: Sequence[T], keys: Mapping[str, Direction] = DEFAULT_KEYS) -> list[T]:
    """The items no other item dominates on `keys` (name -> 'min' | 'max'), in their input order.

    Items missing a value for any key (an invalid plan has no latency) are left out; items equal on
    every key are all kept, since neither is better.
    """
    for key, direction in keys.items():
        if direction not in ("min", "max"):
            from worldtune.tools.words.errors import one_of

            raise one_of(f"keys[{key!r}]", direction, ("min", "max"))
    scored = [(item, s) for item in items if (s := _scores(item, keys)) is not None]
    return [item for item, s in scored if not any(dominates(other, s) for _, other in scored)]


def goal_violations(estimate: Estimate, goal: Goal) -> list[str]:
    """Every constraint of `goal` the estimate breaks, each as a sentence with the values; [] when it meets it."""
    if not estimate.valid:
        return [f"plan {estimate.plan} is refused: {estimate.reason}"]
    found: list[str] = []
    if estimate.model != goal.workload.model:
        found.append(f"model {estimate.model} is not the goal's {goal.workload.model}")
    if estimate.gpu not in goal.gpus:
        found.append(f"GPU {estimate.gpu} is not among the allowed {', '.join(goal.gpus)}")
    if estimate.gpus > goal.max_gpus_per_node:
        found.append(f"uses {estimate.gpus} GPUs, more than the allowed {goal.max_gpus_per_node} per node")
    bound = goal.latency_bound_s
    if bound is not None and (estimate.latency_s is None or estimate.latency_s > bound):
        found.append(
            f"latency {estimate.latency_s or float('nan'):.1f} s exceeds p{goal.latency_percentile} {bound:g} s"
        )
    floor = goal.throughput_floor_clips_per_hour
    if floor is not None and (estimate.clips_per_hour_per_node or 0.0) < floor:
        found.append(f"throughput {estimate.clips_per_hour_per_node or 0.0:.1f} clips/h is under the floor {floor:g}")
    offer = estimate.offer
    if offer is None:
        found.append("no offer rents a node of this shape")
    else:
        if offer.capacity not in goal.capacities:
            found.append(f"capacity {offer.capacity} is not among the allowed {', '.join(goal.capacities)}")
        if goal.infras and offer.infra not in goal.infras:
            found.append(f"infra {offer.infra} is not among the allowed {', '.join(goal.infras)}")
    return found


def meets_goal(estimate: Estimate, goal: Goal) -> bool:
    """Whether a valid estimate respects every constraint of the goal (latency, throughput, GPUs, offer)."""
    return not goal_violations(estimate, goal)
