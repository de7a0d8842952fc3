"""The claim's run in lanes (policies/lanes.py): dealt so the lanes end together, chosen by time and cost."""

from __future__ import annotations

from worldtune.policies import lanes, search
from worldtune.tools.offers import all_offers
from worldtune.tools.words.goal import Goal
from worldtune.tools.words.workload import anchor_workload

GOAL = dict(latency_bound_s=150, gpus=["H200"], capacities=["spot"], budget_usd=300,
            workload=anchor_workload("cosmos3-super"))  # fmt: skip


def candidate(goal: Goal) -> tuple[search.SearchState, search.Candidate]:
    state = search.initial_state(goal, all_offers())
    cand = next(c for c in search.candidates(state) if c.plan == "cfg2-u4-vae8" and c.offer.gpu_count == 8)
    return state, cand


def test_lanes_cut_the_wall_time_and_pay_one_start_each() -> None:
    _, cand = candidate(Goal(**GOAL))
    one = lanes.plan(cand, 59, 1, deployed=True)
    four = lanes.plan(cand, 59, 4, deployed=True)
    assert sum(four.requests) == 59 and four.requests[0] > four.requests[-1]  # the live lane starts first
    assert four.seconds < one.seconds / 2
    start = search.start_seconds(cand, False) * lanes.SAFETY * cand.offer.gpu_count / 3600
    # GPU-hours rise by about one provisioning and cold load per extra lane, not by more
    assert 2.5 * start < four.gpu_hours - one.gpu_hours < 3.5 * start


def test_a_deadline_buys_the_fewest_lanes_that_meet_it() -> None:
    state, cand = candidate(Goal(**GOAL, answer_within_s=2 * 3600))
    chosen = lanes.choose(state, cand, 59, True, False, 300.0)
    assert chosen.seconds <= 2 * 3600
    if chosen.lanes > 1:
        assert lanes.plan(cand, 59, chosen.lanes - 1, True).seconds > 2 * 3600  # one fewer would be late
    unbounded = lanes.choose(state, cand, 59, True, False, 300.0)
    assert unbounded.lanes == chosen.lanes
    poor = lanes.choose(state, cand, 59, True, False, 1.0)  # no budget for a second lane
    assert poor.lanes == 1


def test_without_a_deadline_extra_gpu_hours_stay_within_a_fifth() -> None:
    state, cand = candidate(Goal(**GOAL))
    chosen = lanes.choose(state, cand, 59, True, False, 300.0)
    one = lanes.plan(cand, 59, 1, True)
    assert chosen.lanes > 1 and chosen.gpu_hours - one.gpu_hours <= 0.2 * one.gpu_hours + 1e-9
    assert "lane" in chosen.why


def test_the_search_asks_for_its_full_run_in_lanes() -> None:
    state, cand = candidate(Goal(**GOAL))
    probed = search.record(state, search.Measurement(key=cand.key, kind="probe", per_step_s=cand.per_step_s,
                                                    fixed_s=cand.fixed_s, repeats=4))  # fmt: skip
    probed = probed.model_copy(update={"deployed": [cand.key]})
    full = [a for a in search.decide(probed).actions if a.kind == "full"]
    assert full and full[0].lanes > 1 and sum(full[0].lane_requests) == full[0].requests == 59
