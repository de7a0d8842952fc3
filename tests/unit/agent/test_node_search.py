"""Issue 18, the search plans around nodes: provisioning only for a new node, warm loads on a held one, the
time to a verified answer before approval, and a goal's 'answer within' bound (all modelled, no twin)."""

from __future__ import annotations

import functools

import pytest

from worldtune.agent.goal_parser import parse_goal
from worldtune.policies.search import (
    Action,
    SearchState,
    action_cost,
    candidates,
    decide,
    held_offers,
    initial_state,
    nodes,
    reused_nodes,
    spend_estimate,
)
from worldtune.tools.plans.offers import list_offers
from worldtune.tools.words.goal import Goal

MAIN = "Cosmos3-Super, 720p 189-frame clips, p95 under 150 s, cheapest per clip, H200 or B200, spot ok, budget $300"


@functools.cache
def main_state() -> SearchState:
    return initial_state(parse_goal(MAIN).goal, list_offers())


def test_a_new_node_pays_provisioning_and_a_cold_load_a_held_one_a_warm_load() -> None:
    cand = candidates(main_state())[0]
    new, _ = action_cost(cand, "probe", False, safety=1.0)
    held, _ = action_cost(cand, "probe", False, safety=1.0, node_held=True)
    live, _ = action_cost(cand, "probe", True, safety=1.0)
    assert new - live == pytest.approx(cand.offer.provision_s + cand.cold_load_s)
    assert held - live == pytest.approx(cand.load_s) and cand.cold_load_s > cand.load_s > 0


def test_the_estimate_keeps_one_node_per_offer_and_says_the_time_to_an_answer() -> None:
    state = main_state()
    before = nodes.search_plan(state, reuse_nodes=False)
    after = nodes.search_plan(state)
    offers = {k.split("|", 1)[0] for k in after.keys}
    # the claims' runs add their lanes' nodes (policies/search/lanes.py), on both sides alike
    extra, extra_before = sum(n.lanes for n in after.nodes), sum(n.lanes for n in before.nodes)
    assert after.keys == before.keys and after.deployments - extra == len(offers)
    assert len(offers) < before.deployments - extra_before == len(before.keys)
    assert after.cold_loads - extra == len(offers) and after.warm_loads == len(after.keys) - len(offers)
    assert after.gpu_hours < before.gpu_hours and after.usd < before.usd and after.answer_s < before.answer_s
    assert "modelled" in after.basis and "nothing measured" in after.basis
    usd, gpu_hours, keys = spend_estimate(state)
    assert (usd, gpu_hours, keys) == (after.usd, after.gpu_hours, after.keys)
    # parallel lanes overlap nodes on different offers, never the contenders on one node
    split = nodes.search_plan(state, parallel=4, reuse_nodes=False)
    assert split.answer_s < before.answer_s and split.gpu_hours == pytest.approx(before.gpu_hours)


def test_the_next_action_on_a_held_node_is_priced_as_a_replan() -> None:
    state = main_state()
    first = decide(state).actions[0]
    held = state.model_copy(update={"deployed": [first.key], "iterations": 1})
    other = next(c for c in candidates(state) if c.key != first.key and c.offer.id == first.key.split("|")[0])
    reuse, _ = action_cost(other, "probe", False, node_held=other.offer.id in held_offers(held))
    no_reuse = held.model_copy(update={"reuse_nodes": False})
    fresh, _ = action_cost(other, "probe", False, node_held=other.offer.id in held_offers(no_reuse))
    assert held_offers(no_reuse) == set() and reuse < fresh


def test_a_spare_node_on_the_same_offer_moves_to_the_next_candidate() -> None:
    def act(key: str, **kw: object) -> Action:
        return Action(key=key, kind="probe", expected_usd=1, expected_s=1, needs_deploy=True, reason="", **kw)

    spare = {"nebius/x/H200:8/spot|tp8": "wt-1", "aws/y/H200:8/spot|tp8": "wt-2"}
    moved = reused_nodes([act("nebius/x/H200:8/spot|cfg2-u4-hsdp8"), act("lambda/z/H200:8|tp8")], dict(spare))
    assert moved == {"nebius/x/H200:8/spot|cfg2-u4-hsdp8": "wt-1"}
    assert reused_nodes([act("nebius/x/H200:8/spot|u8", redeploy=True)], dict(spare)) == {}  # a retry: fresh node


def test_answer_within_is_read_refused_and_respected() -> None:
    goal = parse_goal(MAIN + ", answer within 1 hour").goal
    assert goal.answer_within_s == 3600 and "answer within 1 h" in goal.describe()
    assert parse_goal("cheapest per clip, p95 under 150 s, done in 90 minutes").goal.answer_within_s == 5400
    with pytest.raises(ValueError, match="answer_within_s"):
        Goal(answer_within_s=0)
    tight = initial_state(goal.model_copy(update={"answer_within_s": 60.0}), list_offers())
    decision = decide(tight)
    assert decision.stop_kind == "deadline" and "time to answer reached" in (decision.stop_reason or "")
    assert decide(initial_state(goal, list_offers())).actions  # an hour leaves room to start


def test_a_deadline_buys_lanes_dollars_for_time_inside_the_budget() -> None:
    state = main_state()
    serial = nodes.search_plan(state)
    plan, why = nodes.lanes_for_deadline(state)
    assert plan == serial and why is None  # no deadline: nothing bought
    # a deadline the serial search misses but two nodes of the offer at once meet
    goal = state.goal.model_copy(update={"answer_within_s": serial.answer_s * 0.75})
    plan, why = nodes.lanes_for_deadline(state.model_copy(update={"goal": goal}))
    assert plan.parallel >= 2 and plan.answer_s <= goal.answer_within_s and why and "dollars for time" in why
    # each node at once pays its own cold start; dollars are not compared with the serial plan any more: the
    # claims' runs take lanes of their own (policies/search/lanes.py), chosen by the deadline too
    assert plan.deployments >= 2 and plan.cold_loads == plan.deployments
    late = state.model_copy(update={"goal": goal})
    assert nodes.search_plan(late, plan.parallel - 1).answer_s > goal.answer_within_s  # the fewest that meet it
    # too tight for any lane count: the search keeps its lanes and says so (it stops when the time is up)
    tight = state.model_copy(update={"goal": goal.model_copy(update={"answer_within_s": 600.0})})
    plan, why = nodes.lanes_for_deadline(tight)
    assert plan.parallel == 1 and why and "no lane count" in why
    # nor when the lanes would not fit the budget
    cheapest = min(sum(n.usd for n in nodes.search_plan(late, k).nodes) for k in range(2, nodes.MAX_LANES + 1))
    poor = state.model_copy(update={"goal": goal.model_copy(update={"budget_usd": cheapest * 0.9})})
    plan, why = nodes.lanes_for_deadline(poor)
    assert plan.parallel == 1 and why and "budget" in why
