"""Issue 36.3: a quality-changing choice (FP8) is made only when the goal allows it, in the search and in a
traffic goal's fleet alike; the fleet and the recommendation name the same plan or say why they differ."""

from __future__ import annotations

import pytest

from worldtune.agent.fleet_step import why_the_fleet_differs
from worldtune.agent.goal_parser import parse_goal
from worldtune.policies.search.candidates import initial_state
from worldtune.tools.deployments.capacity import CapacityPlan, plan_capacity
from worldtune.tools.plans.offers import list_offers
from worldtune.tools.words.goal import Goal
from worldtune.tools.words.plan import Plan
from worldtune.tools.words.traffic import Traffic

TRAFFIC = Traffic(shape="poisson", rate_per_hour=40, e2e_bound_s=600, e2e_percentile=95)


@pytest.fixture(scope="module")
def bf16() -> CapacityPlan:
    return plan_capacity(Goal(gpus=["H200"], traffic=TRAFFIC))


def fleets(planned: CapacityPlan) -> list[str]:
    assert planned.chosen is not None
    return [c.fleet.plan for c in [planned.chosen, *planned.runners_up]]


def test_the_fleet_is_bf16_unless_the_goal_says_fp8_ok(bf16: CapacityPlan) -> None:
    assert fleets(bf16) and not any(Plan.parse(p).fp8 for p in fleets(bf16)), fleets(bf16)
    allowed = fleets(plan_capacity(Goal(gpus=["H200"], traffic=TRAFFIC, allow_fp8=True)))
    assert any(Plan.parse(p).fp8 for p in allowed), allowed  # the same traffic picks FP8 once it may


def test_the_goal_says_fp8_ok_in_words_and_the_search_follows_it() -> None:
    assert not parse_goal("cheapest per clip, p95 under 150 s").goal.allow_fp8
    allowed = parse_goal("cheapest per clip, p95 under 150 s, fp8 ok").goal
    assert allowed.allow_fp8 and "fp8 ok" in allowed.describe()
    offers = list_offers(gpu="H200")
    assert initial_state(allowed, offers, include_fp8=allowed.allow_fp8).include_fp8


def test_a_fleet_on_another_plan_says_why(bf16: CapacityPlan) -> None:
    assert bf16.chosen is not None and bf16.runners_up
    said = why_the_fleet_differs(bf16, "tp8")
    assert said.startswith(f"the fleet runs {bf16.chosen.fleet.plan}, not the recommended tp8"), said
    runner = bf16.runners_up[0]
    assert f"${runner.daily_cost_usd:.2f}/day" in why_the_fleet_differs(bf16, runner.fleet.plan) or (
        runner.fleet.plan == bf16.chosen.fleet.plan
    )
