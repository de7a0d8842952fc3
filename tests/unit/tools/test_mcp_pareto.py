"""The Pareto frontier and goal checks that list_plans (and the agent's search) rely on."""

from __future__ import annotations

import pytest

from worldtune.policies.pareto import goal_violations, meets_goal, pareto_frontier
from worldtune.tools.plans.estimate import estimate, list_plans
from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.goal import Goal
from worldtune.tools.words.workload import anchor_workload


def test_frontier_keeps_only_undominated_items_in_input_order() -> None:
    items = [
        {"name": "fast-dear", "latency_s": 50.0, "usd_per_clip": 2.0, "clips_per_hour_per_node": 70.0},
        {"name": "slow-cheap", "latency_s": 300.0, "usd_per_clip": 0.5, "clips_per_hour_per_node": 60.0},
        {"name": "dominated", "latency_s": 310.0, "usd_per_clip": 0.6, "clips_per_hour_per_node": 50.0},
        {"name": "twin-of-fast", "latency_s": 50.0, "usd_per_clip": 2.0, "clips_per_hour_per_node": 70.0},
        {"name": "no-latency", "latency_s": None, "usd_per_clip": 0.1, "clips_per_hour_per_node": 99.0},
    ]
    names = [i["name"] for i in pareto_frontier(items)]
    assert names == ["fast-dear", "slow-cheap", "twin-of-fast"]


def test_frontier_direction_matters() -> None:
    items = [{"x": 1.0}, {"x": 2.0}, {"x": 3.0}]
    assert pareto_frontier(items, {"x": "min"}) == [{"x": 1.0}]
    assert pareto_frontier(items, {"x": "max"}) == [{"x": 3.0}]


def test_frontier_refuses_unknown_direction() -> None:
    with pytest.raises(InvalidInput, match=r"'x'.*min, max"):
        pareto_frontier([{"x": 1.0}], {"x": "lowest"})  # type: ignore[dict-item]


def test_frontier_of_real_estimates_is_not_dominated() -> None:
    valid = [e for e in list_plans(model="cosmos3-super", gpu="H200", gpus=8) if e.valid]
    front = pareto_frontier(valid)
    assert front and len(front) < len(valid)
    for f in front:
        for e in valid:
            better_everywhere = (
                e.latency_s < f.latency_s  # type: ignore[operator]
                and e.usd_per_clip < f.usd_per_clip  # type: ignore[operator]
                and e.clips_per_hour_per_node > f.clips_per_hour_per_node  # type: ignore[operator]
            )
            assert not better_everywhere, (f.plan, e.plan)


def test_meets_goal_checks_latency_throughput_gpu_and_capacity() -> None:
    e = estimate(model="cosmos3-super", gpu="H200", plan="cfg2-u4-hsdp8")
    assert e.latency_s is not None and e.clips_per_hour_per_node is not None
    wl = anchor_workload("cosmos3-super")
    assert meets_goal(e, Goal(workload=wl, latency_bound_s=e.latency_s + 1))
    slow = goal_violations(e, Goal(workload=wl, latency_bound_s=e.latency_s - 1))
    assert len(slow) == 1 and "latency" in slow[0] and "exceeds" in slow[0]
    floor = goal_violations(e, Goal(workload=wl, throughput_floor_clips_per_hour=e.clips_per_hour_per_node * 2))
    assert len(floor) == 1 and "under the floor" in floor[0]
    assert not meets_goal(e, Goal(workload=wl, gpus=["B200"]))
    assert not meets_goal(e, Goal(workload=wl, capacities=["spot"]))
    assert e.offer is not None and e.offer.infra != "aws"
    assert not meets_goal(e, Goal(workload=wl, infras=["aws"]))
    assert meets_goal(e, Goal(workload=wl, infras=[e.offer.infra]))


def test_refused_plan_never_meets_a_goal() -> None:
    e = estimate(model="cosmos3-super", gpu="H200", plan="tp8-hsdp8")
    assert not e.valid
    reasons = goal_violations(e, Goal(workload=anchor_workload()))
    assert reasons and "refused" in reasons[0]
