"""The claim's run in lanes (policies/search/lanes.py): dealt so the lanes end together, chosen by time and cost."""

from __future__ import annotations

from worldtune.policies import search
from worldtune.policies.search import lanes
from worldtune.policies.search.candidates import assess
from worldtune.policies.search.draws import Draws, draws
from worldtune.tools.plans.offers import all_offers
from worldtune.tools.words.goal import Goal
from worldtune.tools.words.workload import anchor_workload

GOAL = dict(latency_bound_s=150, gpus=["H200"], capacities=["spot"], budget_usd=300,
            workload=anchor_workload("cosmos3-super"))  # fmt: skip


def candidate(goal: Goal) -> tuple[search.SearchState, search.Candidate]:
    state = search.initial_state(goal, all_offers())
    cand = next(c for c in search.candidates(state) if str(c.plan) == "cfg2-u4-vae8" and c.offer.gpu_count == 8)
    return state, cand


def probed_and_live(elapsed_s: float) -> tuple[search.SearchState, search.Candidate, Draws, int]:
    """The main job's candidate probed and live on its node `elapsed_s` into the search, the round's draws, and its
    index in them: the run worth_first weighs a probe first against."""
    state, cand = candidate(Goal(**GOAL))
    state = search.record(state, search.Measurement(key=cand.key, kind="probe", per_step_s=cand.per_step_s,
                                                    fixed_s=cand.fixed_s, repeats=4))  # fmt: skip
    state = state.model_copy(update={"deployed": [cand.key], "elapsed_s": elapsed_s})
    d = draws(state, assess(state))
    return state, cand, d, next(i for i, c in enumerate(d.cands) if c.key == cand.key)


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


def test_without_a_deadline_extra_gpu_hours_stay_within_the_default_share() -> None:
    state, cand = candidate(Goal(**GOAL))
    chosen = lanes.choose(state, cand, 59, True, False, 300.0)
    one = lanes.plan(cand, 59, 1, True)
    assert chosen.lanes > 1 and chosen.gpu_hours - one.gpu_hours <= lanes.DEFAULT_EXTRA * one.gpu_hours + 1e-9
    assert "lane" in chosen.why


def test_lanes_launched_with_the_probe_before_the_run_start_sooner_and_bill_only_their_start() -> None:
    _, cand = candidate(Goal(**GOAL))
    cold = search.start_seconds(cand, False)
    now = lanes.plan(cand, 59, 4, deployed=True)
    early = lanes.plan(cand, 59, 4, deployed=True, head_s=cold)  # up when the run starts
    assert early.seconds < now.seconds - 0.5 * cold * lanes.SAFETY
    assert abs(early.node_seconds - now.node_seconds) < 1e-6 * now.node_seconds  # the same starts, billed
    # a longer probe: they are launched later in it, so they are up at its end and wait for nothing
    later = lanes.plan(cand, 59, 4, deployed=True, head_s=2 * cold)
    assert later.seconds == early.seconds and later.node_seconds == early.node_seconds


def test_spare_nodes_serve_first_and_their_start_is_not_billed_again() -> None:
    _, cand = candidate(Goal(**GOAL))
    other = f"{cand.offer.id}|u8"
    starts = lanes.extra_starts(cand, 4, spare=[cand.key, other, "elsewhere|u8"])
    assert starts[0] == (0.0, 0.0)  # the same plan, up: nothing to wait for or bill
    assert starts[1] == (cand.load_s, cand.load_s)  # another plan on the offer: a warm load
    assert starts[2] == (search.start_seconds(cand, False),) * 2  # a node of another offer does not count
    spare = lanes.plan(cand, 59, 3, deployed=True, spare=[cand.key, cand.key])
    fresh = lanes.plan(cand, 59, 3, deployed=True)
    assert spare.seconds < fresh.seconds and spare.node_seconds < fresh.node_seconds


def test_a_decision_keeps_only_the_spare_nodes_its_runs_use() -> None:
    _, cand = candidate(Goal(**GOAL))
    full = search.Action(key=cand.key, kind="full", expected_usd=1, expected_s=1, needs_deploy=False, reason="")
    probe = full.model_copy(update={"kind": "probe", "key": "other-offer|u8"})
    spare = [cand.key, f"{cand.offer.id}|u8", "other-offer|u8"]
    assert lanes.kept_spares(spare, [full]) == spare[:2]
    assert lanes.kept_spares(spare, [probe]) == []  # a probe launching nothing keeps nothing
    assert lanes.kept_spares(spare, [probe.model_copy(update={"early_lanes": 1})]) == []  # it needs no spare
    assert lanes.kept_spares(spare, [probe.model_copy(update={"spares_held": 1})]) == spare[2:]  # it holds one
    held = full.model_copy(update={"kind": "probe", "spares_held": 1})
    assert lanes.kept_spares(spare, [held]) == spare[:1]  # as many as it holds, no more


def test_the_search_launches_the_runs_lanes_with_the_probe_before_it() -> None:
    """Searching an H200-or-B200, spot-or-on-demand goal against its own belief: the probe the search makes just
    before the full run it has in view launches nodes for that run, and the run's lanes count them (its spare nodes)."""
    goal = Goal(latency_bound_s=150, gpus=["H200", "B200"], capacities=["spot", "on-demand"], budget_usd=300,
                workload=anchor_workload("cosmos3-super"))  # fmt: skip
    state = search.initial_state(goal, all_offers())
    early = None
    for _ in range(6):
        decision = search.decide(state)
        assert decision.actions, decision.stop_reason
        action = decision.actions[0]
        if action.kind == "full":
            break
        cand = next(c for c in search.candidates(state) if c.key == action.key)
        state = search.record(state, search.Measurement(key=cand.key, kind="probe", per_step_s=cand.per_step_s,
                                                        fixed_s=cand.fixed_s, repeats=4))  # fmt: skip
        spare = [f"{cand.offer.id}|{action.early_plan}"] * action.early_lanes
        early = early or (action if action.early_lanes else None)
        state = state.model_copy(update={"deployed": [cand.key], "spare_lanes": state.spare_lanes + spare,
                                         "elapsed_s": state.elapsed_s + action.expected_s})  # fmt: skip
    assert early is not None and early.early_plan and "launched with this probe" in early.reason
    assert early.early_after_s >= 0 and "P(optimum on this offer)" in early.reason
    assert action.kind == "full" and action.key.split("|", 1)[0] == early.key.split("|", 1)[0]
    assert action.lanes >= early.early_lanes + 1  # the nodes launched for it are among its lanes


def test_the_search_asks_for_its_full_run_in_lanes() -> None:
    state, cand = candidate(Goal(**GOAL))
    probed = search.record(state, search.Measurement(key=cand.key, kind="probe", per_step_s=cand.per_step_s,
                                                    fixed_s=cand.fixed_s, repeats=4))  # fmt: skip
    probed = probed.model_copy(update={"deployed": [cand.key]})
    for _ in range(4):  # near-ties may be probed first (as predicted here); then the full run
        actions = search.decide(probed).actions
        full = [a for a in actions if a.kind == "full"]
        if full or not actions:
            break
        other = next(c for c in search.candidates(probed) if c.key == actions[0].key)
        probed = search.record(probed, search.Measurement(key=other.key, kind="probe", per_step_s=other.per_step_s,
                                                         fixed_s=other.fixed_s, repeats=4))  # fmt: skip
    assert full and full[0].lanes > 1 and sum(full[0].lane_requests) == full[0].requests == 59


def test_with_more_probes_likely_before_the_run_the_probe_launches_no_node() -> None:
    """A probe launches the run's nodes only when it is the last worth making before the run: with other
    challengers still worth a probe the nodes would wait through theirs. A spare node already up is then kept
    through the probe only when that costs less than starting it again."""
    state, cand = candidate(Goal(**GOAL))
    n = len(search.candidates(state))
    p_best = [0.0] * n
    p_best[next(i for i, c in enumerate(search.candidates(state)) if c.key == cand.key)] = 1.0
    cands = search.candidates(state)
    cold = search.start_seconds(cand, False) * lanes.SAFETY
    # a probe as long as a start: after it, the run would need more lanes to answer in the hour
    last = lanes.early_lanes(state, cand, cand, cold, 1e4, 59, p_best, cands)
    assert last is not None and last.lanes.lanes - 1 - last.spare > 0  # the last probe launches the nodes
    assert lanes.early_lanes(state, cand, cand, cold, 1e4, 59, p_best, cands, launch=False) is None  # nothing up
    args = (state, cand, cand, 0.5 * cold, 1e4, 59, p_best, cands)
    spared = state.model_copy(update={"spare_lanes": [cand.key] * 2})
    short = lanes.early_lanes(spared, *args[1:], launch=False)
    assert short is not None and short.spare == 2 and short.lanes.lanes - 1 - short.spare == 0
    # a probe longer than a start: holding the spares through it costs more than starting them again
    assert lanes.early_lanes(spared, cand, cand, 2 * cold, 1e4, 59, p_best, cands, launch=False) is None


def test_a_challenger_within_the_margin_of_the_verified_best_gets_no_full_run() -> None:
    """Once a plan is verified, a probed challenger that wins the draws is run in full only when it could beat the
    best by more than the margin (P >= STOP_LEVEL): a plan 1% better is no better an answer, a plan 10% better is."""
    import numpy as np

    from worldtune.policies.search.candidates import best_verified
    from worldtune.policies.search.choose import Pick, _Round

    state, best = candidate(Goal(**GOAL))
    rival = next(
        c for c in search.candidates(state) if c.offer.id == best.offer.id and str(c.plan) == "cfg2-u4-hsdp2-vae8"
    )
    for cand in (best, rival):
        state = search.record(state, search.Measurement(key=cand.key, kind="probe", per_step_s=cand.per_step_s,
                                                        fixed_s=cand.fixed_s, repeats=4))  # fmt: skip
    state = search.record(state, search.Measurement(key=best.key, kind="full", requested=59,
                                                    latencies_s=[best.latency_s] * 59))  # fmt: skip
    assessed = assess(state)
    cands = [a.cand for a in assessed]
    verified = best_verified(state, cands)
    assert verified is not None and verified.key == best.key
    d = draws(state, assessed)
    i = next(k for k, c in enumerate(cands) if c.key == rival.key)
    open_ = np.asarray([c.stage != "measured" for c in cands])
    value_best = search.objective_value(state.goal, verified)

    def picks_for(ratio: float) -> list[Pick]:
        feasible = d.feasible.copy()
        feasible[open_] = False  # the rival alone is open and feasible: it wins every draw
        feasible[i] = True
        objective = d.objective.copy()
        objective[i] = ratio * value_best
        rigged = Draws(assessed=assessed, objective=objective, feasible=feasible, log_latency=d.log_latency)
        zeros = np.zeros(len(cands))
        picks, _ = _Round(state, rigged, zeros, zeros, open_, verified, 0.03, None, None).picks(None)
        return picks

    assert Pick(i, "lead") not in picks_for(0.99)  # within the margin: no full run bought first
    assert picks_for(0.90)[0] == Pick(i, "lead")  # beats it by 10%: its full run goes first


def test_a_probe_before_the_run_is_priced_with_the_lanes_its_time_adds() -> None:
    """Issue 39 item 3: probing a rival first costs the probe and the run after it, later and so perhaps in more
    lanes; the run now costs itself and, with P(the rival beats it), the rival's probe and its own later run."""
    from worldtune.policies.search.choose import probe_first_gain

    # time to spare: the run costs the same after the probe, and a 20% chance of a second run pays for the probe
    assert probe_first_gain(0.2, 8.0, 60.0, 60.0, 60.0) > 0
    # the probe's time pushes the run into one more lane ($20 more): the same chance no longer pays for it
    assert probe_first_gain(0.2, 8.0, 60.0, 80.0, 60.0) < 0
    # ...unless the second run, after the first, would cost much more (past the aim, in many lanes)
    assert probe_first_gain(0.2, 8.0, 60.0, 80.0, 200.0) > 0
    assert probe_first_gain(0.0, 8.0, 60.0, 60.0, 60.0) == -8.0  # a rival that never wins: the probe is all cost


def test_the_first_probe_launches_the_runs_lanes_when_they_spare_it_starts() -> None:
    """Nothing measured yet, the main job's first probe is of the plan it will likely verify: started after the
    probe, the claim's run would need more lanes (each a start) to answer within the hour, so its nodes are launched
    with the probe, late enough to be up when it ends; unless the run is unlikely to follow the probe (its
    verification would not end the search), when their start would most likely be lost."""
    from worldtune.policies.search.candidates import action_cost

    goal = Goal(latency_bound_s=150, gpus=["H200", "B200"], capacities=["spot", "on-demand"], budget_usd=300,
                workload=anchor_workload("cosmos3-super"))  # fmt: skip
    state = search.initial_state(goal, all_offers())
    first = search.decide(state).actions[0]
    assert first.kind == "probe" and first.early_lanes > 0 and "launched with this probe" in first.reason
    cands = search.candidates(state)
    cand = next(c for c in cands if c.key == first.key)
    p_best = [1.0 if c.key == cand.key else 0.0 for c in cands]
    probe_s, _ = action_cost(cand, "probe", False)  # modelled, with the actions' safety factor
    args = (state, cand, cand, probe_s, 300.0, 59, p_best, cands)
    after = lanes.choose(state, cand, 59, True, False, 300.0, state.elapsed_s + probe_s / lanes.SAFETY)
    launched = lanes.early_lanes(*args)
    assert launched is not None and launched.lanes.lanes < after.lanes  # fewer lanes than started after the probe
    assert lanes.early_lanes(*args, follows=0.2) is None  # a run unlikely to come next: nothing launched for it


def test_lanes_as_many_either_way_are_not_launched_early() -> None:
    """A run that takes as many lanes started after the probe as with it costs the same node-seconds either way:
    nodes launched with the probe would buy only time the aim does not need, and risk their start."""
    state, cand = candidate(Goal(**GOAL, answer_within_s=10 * 3600))  # time to spare: one lane either way
    cands = search.candidates(state)
    p_best = [1.0 if c.key == cand.key else 0.0 for c in cands]
    cold = search.start_seconds(cand, False) * lanes.SAFETY
    assert lanes.choose(state, cand, 59, True, False, 300.0).lanes == 1
    assert lanes.early_lanes(state, cand, cand, 0.5 * cold, 300.0, 59, p_best, cands) is None


def test_a_probe_is_priced_net_of_the_later_probe_it_spares_the_likeliest_optimum() -> None:
    """A full run needs its plan probed first, so probing a likely optimum now spares, with P(it is the optimum),
    a probe later (on a node the search then holds); a plan that is never the optimum spares nothing."""
    import numpy as np

    from worldtune.policies.search.candidates import action_cost
    from worldtune.policies.search.choose import _Round

    state, _ = candidate(Goal(**GOAL))
    assessed = assess(state)
    cands = [a.cand for a in assessed]
    d = draws(state, assessed)
    zeros = np.zeros(len(cands))
    r = _Round(state, d, zeros, zeros, np.ones(len(cands), dtype=bool), None, 0.03, None, None)
    likeliest = int(np.argmax(r.p_best))
    never = next(i for i in range(len(cands)) if r.p_best[i] == 0)
    for i in (likeliest, never):
        c = cands[i]
        gross = action_cost(c, "probe", False)[1]
        later = action_cost(c, "probe", False, node_held=True)[1]
        assert r._net_usd(i, c) == gross - r.p_best[i] * later
    assert (
        r.p_best[likeliest] > 0
        and r._net_usd(likeliest, cands[likeliest]) < action_cost(cands[likeliest], "probe", False)[1]
    )
    assert r._net_usd(never, cands[never]) == action_cost(cands[never], "probe", False)[1]


def test_a_probe_first_spares_the_run_where_it_alone_settles_the_answer() -> None:
    """worth_first's chance: P(the run now is not the answer) less P(it still is not, the candidate probed first,
    the better of the two then run). Two rivals as good as each other that beat the run in the same draws: either
    settles them (the pairwise chance counts each once, the union is what a first probe spares); one better than
    the other there: only the better one does; in different draws, each settles its own; where the run is
    infeasible, a feasible rival settles it."""
    import numpy as np

    from worldtune.policies.search.choose import _unsettled
    from worldtune.policies.search.draws import Draws

    run, a, b = 0, 1, 2
    objective = np.ones((3, 4))
    feasible = np.ones((3, 4), dtype=bool)
    open_ = np.ones(3, dtype=bool)

    def settled(obj: np.ndarray, ok: np.ndarray) -> tuple[float, float, float]:
        d = Draws(assessed=[], objective=obj, feasible=ok, log_latency=np.zeros((3, 4)))
        p = _unsettled(d, open_, run, 0.03)
        return p(None), p(None) - p(a), p(None) - p(b)

    together = objective.copy()
    together[a, :2] = together[b, :2] = 0.9  # both 10% better in draws 0 and 1
    assert settled(together, feasible) == (0.5, 0.5, 0.5)
    ahead = together.copy()
    ahead[b, :2] = 0.8  # b beats a there too: probing a first leaves b to beat it
    assert settled(ahead, feasible) == (0.5, 0.0, 0.5)
    apart = objective.copy()
    apart[a, 0] = apart[b, 1] = 0.9  # a in draw 0, b in draw 1
    assert settled(apart, feasible) == (0.5, 0.25, 0.25)
    infeasible = feasible.copy()
    infeasible[run, 3] = False  # the run fails the goal in draw 3: either rival is the answer there
    assert settled(objective, infeasible) == (0.25, 0.25, 0.25)
    within = objective.copy()
    within[a] = 0.99  # a 1% better everywhere: within the margin, nothing to settle
    assert settled(within, feasible)[1] == 0.0


def test_a_run_whose_nodes_outlast_the_probe_starts_with_every_lane_up() -> None:
    """The probe's action ends once the nodes launched with it are up (the agent waits for them): with a probe
    shorter than a node's start, the run is planned from then, every lane up, its requests dealt evenly; the
    probe's action lasts that much longer."""
    state, cand = candidate(Goal(**GOAL))
    state = state.model_copy(update={"elapsed_s": 1000.0})  # the hour is short: the run needs its lanes
    cands = search.candidates(state)
    p_best = [1.0 if c.key == cand.key else 0.0 for c in cands]
    cold = search.start_seconds(cand, False) * lanes.SAFETY
    early = lanes.early_lanes(state, cand, cand, 0.5 * cold, 1e4, 59, p_best, cands)
    assert early is not None and early.seconds == 0.5 * cold  # the action waits for the nodes
    dealt = early.lanes.requests
    assert max(dealt) - min(dealt) <= cand.plan.replicas  # none of them joins late with fewer requests


def test_a_rival_probed_on_the_runs_node_leaves_the_run_a_warm_load(monkeypatch: object) -> None:
    """Probing a rival of the same offer first replans the node the run's plan is live on: the run after that probe
    is priced from a held node (a warm load of its plan again), not from its live deployment."""
    import pytest

    from worldtune.policies.search import choose as choosing

    assert isinstance(monkeypatch, pytest.MonkeyPatch)
    state, cand, d, full = probed_and_live(0.0)
    cands = d.cands
    seen: list[tuple[str, bool, bool, float | None]] = []
    real = choosing.deal_lanes

    def spy(state: search.SearchState, c: search.Candidate, requests: int, deployed: bool, node_held: bool,
            left: float, elapsed_s: float | None = None, head_s: float = 0.0) -> lanes.LanePlan:  # fmt: skip
        seen.append((c.key, deployed, node_held, elapsed_s))
        return real(state, c, requests, deployed, node_held, left, elapsed_s, head_s)

    monkeypatch.setattr(choosing, "deal_lanes", spy)
    import numpy as np

    open_ = np.asarray([c.stage != "measured" and c.key != cand.key for c in cands])
    held = {cand.offer.id}
    choosing.worth_first(state, d, full, {cand.key}, open_, held, 59, 0.03)
    now = [s for s in seen if s[0] == cand.key and s[3] is None]
    after = [s for s in seen if s[0] == cand.key and s[3] is not None]
    assert now and all(s[1] for s in now)  # the run now: on its live deployment
    assert after and all(not s[1] and s[2] for s in after)  # after a same-offer probe: a warm load on the node


def test_a_run_takes_every_spare_node_up_under_its_plan() -> None:
    """Spare nodes already up under the run's plan (launched with its probe) have their start sunk: a lane on each
    moves requests off the others (the same node-seconds, sooner), so the run takes them all, even where fewer
    lanes would answer in time; spares under another plan are not counted (each needs a warm load)."""
    state, cand = candidate(Goal(**GOAL, answer_within_s=10 * 3600))  # time to spare: one lane would do
    assert lanes.choose(state, cand, 59, True, False, 300.0).lanes == 1
    up = state.model_copy(update={"spare_lanes": [cand.key] * 3})
    run = lanes.choose(up, cand, 59, True, False, 300.0)
    assert run.lanes == 4 and sum(run.requests) == 59 and "up for it already" in run.why
    one = lanes.choose(state, cand, 59, True, False, 300.0)
    assert run.usd <= one.usd * 1.05  # about the same node-seconds: no start billed, the rounds dealt over them
    other = state.model_copy(update={"spare_lanes": [f"{cand.offer.id}|u8-vae8"] * 3})
    assert lanes.choose(other, cand, 59, True, False, 300.0).lanes == 1


def test_the_first_probe_has_a_rival_probed_on_one_of_the_runs_new_nodes_when_worth_it() -> None:
    """The main job's first decision launches the claim's lanes with its probe; one of those nodes first probes the
    rival most worth it on that offer, at once with the first probe (a node the run starts anyway: it adds only
    that probe and the warm load that replans the node for the run), and the run then takes it. Where what the
    rival may find is worth less than that (a production of 10 clips), no rider and the nodes all wait."""
    goal = Goal(latency_bound_s=150, gpus=["H200", "B200"], capacities=["spot", "on-demand"], budget_usd=300,
                workload=anchor_workload("cosmos3-super"))  # fmt: skip
    state = search.initial_state(goal, all_offers())
    first, rider = search.decide(state).actions
    assert first.kind == rider.kind == "probe" and rider.rides and not first.rides
    assert search.offer_of(rider.key) == search.offer_of(first.key) and rider.key != first.key
    assert first.early_lanes >= 1 and "then joins the run" in first.reason and "at once with it" in rider.reason
    few = search.initial_state(goal.model_copy(update={"production_clips": 10}), all_offers())
    alone = search.decide(few).actions
    assert len(alone) == 1 and alone[0].early_lanes == first.early_lanes + 1  # the node it took only waits


def test_a_node_left_on_a_runs_offer_joins_it_as_a_lane() -> None:
    """A live node the claim's decision no longer needs as it is (the rider's, under the rival's plan) is one of the
    run's lanes: replanned, a warm load; not on a full run's offer, it is torn down (freed_lanes gives none)."""
    state, cand = candidate(Goal(**GOAL))
    rival = f"{cand.offer.id}|u8-vae8"
    live = state.model_copy(update={"deployed": [cand.key, rival]})
    full = search.Action(key=cand.key, kind="full", expected_usd=1, expected_s=1, needs_deploy=False, reason="")
    probe = full.model_copy(update={"kind": "probe"})
    assert lanes.freed_lanes([full], [rival]) == [rival] and lanes.freed_lanes([probe], [rival]) == []
    alone = lanes.choose(state, cand, 59, True, False, 300.0)
    joined = lanes.choose(live, cand, 59, True, False, 300.0, freed=[rival])
    assert joined.lanes == alone.lanes
    assert joined.usd < alone.usd and joined.seconds < alone.seconds  # a warm load instead of provisioning and cold
    fresh = lanes.plan(cand, 59, 2, True)
    replanned = lanes.plan(cand, 59, 2, True, spare=[rival])
    assert replanned.usd < fresh.usd and replanned.seconds < fresh.seconds


def test_without_a_deadline_no_lane_is_added_that_would_start_longer_than_it_serves(monkeypatch: object) -> None:
    """Late in a search (the hour mostly gone) with two spare nodes up, the default aim is out of reach whatever
    the lanes; new nodes started now get few requests, each billed a provisioning and cold load (~920 s) for less
    serving than that. The run stops adding lanes before one would; with the rule removed it takes 7 for 15% less
    time. A deadline (`answer within`) still buys them."""
    import math

    import pytest

    state, cand = candidate(Goal(**GOAL))
    late = state.model_copy(update={"elapsed_s": 1950.0, "spare_lanes": [cand.key] * 2})
    run = lanes.choose(late, cand, 59, True, False, 300.0)
    start = search.start_seconds(cand, False)
    assert all(math.ceil(n / cand.plan.replicas) * cand.latency_s >= start for n in run.requests[3:])
    deadline = late.model_copy(update={"goal": late.goal.model_copy(update={"answer_within_s": 3600.0})})
    assert lanes.choose(deadline, cand, 59, True, False, 300.0).lanes > run.lanes
    assert isinstance(monkeypatch, pytest.MonkeyPatch)
    monkeypatch.setattr(lanes, "_mostly_start", lambda *_: False)
    greedy = lanes.choose(late, cand, 59, True, False, 300.0)
    assert greedy.lanes > run.lanes and min(greedy.requests) * cand.latency_s < start


def test_what_a_round_has_left_is_the_budget_less_what_it_bought(monkeypatch: object) -> None:
    """With a rider, the first probe's price holds all its new nodes' starts and the rider's the start of the node
    it rides: the round takes that start off the budget once (the actions' prices sum to what it took), so the
    rider and later buys of the round (--parallel) see all the budget that is left."""
    import pytest

    from worldtune.policies.search import choose

    assert isinstance(monkeypatch, pytest.MonkeyPatch)
    rounds: list[choose._Round] = []
    buy = choose._Round.buy
    monkeypatch.setattr(choose._Round, "buy", lambda self, *a: (rounds.append(self), buy(self, *a))[1])
    goal = Goal(latency_bound_s=150, gpus=["H200", "B200"], capacities=["spot", "on-demand"], budget_usd=300,
                workload=anchor_workload("cosmos3-super"))  # fmt: skip
    actions = search.decide(search.initial_state(goal, all_offers())).actions
    assert any(a.rides for a in actions)  # the premise: the main job's first decision buys a rider
    assert 300 - rounds[-1].left == pytest.approx(sum(a.expected_usd for a in actions))


def test_past_the_default_aim_a_lane_is_bought_only_when_the_lateness_it_spares_is_worth_its_price() -> None:
    """Without `answer within`, a run that can still meet the hour takes the fewest lanes that do; one that cannot
    takes the lanes whose cost plus their lateness, priced (lanes.late_usd: LATE_NODES node-hours of the run's offer
    per hour past the aim), is least, not the fewest within 10% of the fastest (which bought 6 lanes where the
    one-hour oracle took 3). The price is on the plan it returns, for the search to weigh the paths it compares."""
    state, cand = candidate(Goal(**GOAL))
    one = lanes.plan(cand, 59, 1, True)
    cap = lanes.DEFAULT_EXTRA * one.gpu_hours
    late_runs = 0
    for elapsed in (0.0, 1800.0, 2700.0, 3300.0, 3600.0, 7200.0):
        at = state.model_copy(update={"elapsed_s": elapsed})
        run = lanes.choose(at, cand, 59, True, False, 300.0)
        options = [
            p
            for n in range(1, lanes.MAX_LANES + 1)
            if (p := lanes.plan(cand, 59, n, True)).lanes == n
            and p.gpu_hours - one.gpu_hours <= cap
            and (n == 1 or not lanes._mostly_start(cand, p, 0.0, []))
        ]
        if lanes.in_time(at, run, elapsed):
            assert run.late_usd == 0.0 and "meets" in run.why
            assert not any(lanes.in_time(at, p, elapsed) for p in options if p.lanes < run.lanes)
            continue
        late_runs += 1
        assert not any(lanes.in_time(at, p, elapsed) for p in options)
        assert run.late_usd == lanes.late_usd(cand, run, elapsed) > 0.0 and "h late" in run.why
        for p in options:  # nothing allowed is cheaper once its lateness is priced
            assert run.usd + run.late_usd <= p.usd + lanes.late_usd(cand, p, elapsed) + 1e-9, (elapsed, p.lanes)
        fastest = min(options, key=lambda p: p.seconds)
        assert run.lanes < fastest.lanes  # the last lanes buy less time than they cost
    assert late_runs >= 2
    # an hour later costs one node-hour of the offer more; a deadline (`answer within`) is not priced, it is held
    assert (
        abs(
            lanes.late_usd(cand, one, 7200.0)
            - lanes.late_usd(cand, one, 3600.0)
            - lanes.LATE_NODES * cand.offer.usd_per_hour
        )
        < 1e-6
    )
    deadline = state.model_copy(update={"goal": state.goal.model_copy(update={"answer_within_s": 3 * 3600.0})})
    assert lanes.choose(deadline.model_copy(update={"elapsed_s": 7200.0}), cand, 59, True, False, 300.0).late_usd == 0.0


def test_a_probe_first_is_weighed_with_the_lateness_of_each_paths_run(monkeypatch: object) -> None:
    """worth_first prices each path's claim with its lateness past the default aim: the run now, the run after
    the probe, and the rival's own run after the run now (which ends late when the hour is spent on a plan the
    search does not end on). Without it, a run that just meets the hour was never worth delaying by a probe even
    when the second run it risks would answer an hour late (three B200 truths on seed 11: 2.2x the oracle)."""
    import numpy as np
    import pytest

    from worldtune.policies.search import choose as choosing

    assert isinstance(monkeypatch, pytest.MonkeyPatch)
    state, cand, d, full = probed_and_live(1200.0)
    cands = d.cands
    plans: list[lanes.LanePlan] = []
    weighed: list[tuple[float, float, float]] = []
    real_deal, real_gain = choosing.deal_lanes, choosing.probe_first_gain

    def deal(*args: object, **kwargs: object) -> lanes.LanePlan:
        plans.append(real_deal(*args, **kwargs))  # type: ignore[arg-type]
        return plans[-1]

    def gain(p: float, probe: float, now: float, after: float, second: float) -> float:
        weighed.append((now, after, second))
        return real_gain(p, probe, now, after, second)

    monkeypatch.setattr(choosing, "deal_lanes", deal)
    monkeypatch.setattr(choosing, "probe_first_gain", gain)
    open_ = np.asarray([c.stage != "measured" and c.key != cand.key for c in cands])
    choosing.worth_first(state, d, full, {cand.key}, open_, {cand.offer.id}, 59, 0.03)
    assert weighed
    now, rest = plans[0], plans[1:]
    pairs = [(rest[2 * k], rest[2 * k + 1]) for k in range(len(rest) // 2)]  # (after the probe, the rival's run)
    assert len(pairs) == len(weighed)
    for (after, second), (w_now, w_after, w_second) in zip(pairs, weighed, strict=True):
        assert w_now == pytest.approx(now.usd + now.late_usd)
        assert w_after == pytest.approx(after.usd + after.late_usd)
        assert w_second == pytest.approx(second.usd + second.late_usd)
    assert any(second.late_usd > 0.0 for _, second in pairs)  # the rival's run after the run now ends late
