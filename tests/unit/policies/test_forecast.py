"""The forecast of a search's cost and time (policies/search/forecast.py): simulated searches against the belief, shown
before approval beside the bound (policies/search/nodes.py)."""

from __future__ import annotations

import numpy as np

from worldtune.policies import belief, search
from worldtune.policies.calibration import shipped_profile
from worldtune.policies.search.forecast import draw_truth
from worldtune.tools.plans.offers import all_offers
from worldtune.tools.words.goal import Goal
from worldtune.tools.words.workload import anchor_workload


def _goal() -> Goal:
    return Goal.model_validate({
        "objective": "min_cost_per_clip", "workload": anchor_workload(width=832, height=480, num_frames=121),
        "latency_bound_s": 60, "gpus": ["H200"], "capacities": ["on-demand"], "budget_usd": 100,
    })  # fmt: skip


def test_the_forecast_is_a_likely_search_not_the_bound() -> None:
    """The bound counts a probe for every near contender and two full runs; the search takes a few probes and one
    full run, and the forecast says so: below the bound, and a whole search (a probe and a full run at least)."""
    state = search.initial_state(_goal(), all_offers("snapshot"))
    bound = search.search_plan(state)
    likely = search.forecast(state, runs=2)
    assert likely.runs == 2 and likely.stops == {"converged": 2}
    assert likely.measurements_p50 >= 2
    full_run = min(
        search.full_seconds(c, search.full_requests(state.goal)) for c in search.candidates(state) if c.feasible
    )
    assert full_run < likely.answer_s_p50 < bound.answer_s
    assert 0 < likely.usd_p50 <= likely.usd_max < bound.usd
    assert "simulated" in likely.basis


def test_the_forecast_is_seeded_and_its_truths_come_from_the_belief() -> None:
    state = search.initial_state(_goal(), all_offers("snapshot"))
    assert search.forecast(state, runs=1, seed=3) == search.forecast(state, runs=1, seed=3)
    prior = shipped_profile("H200")
    post = belief.prior_posterior(prior)
    rng = np.random.default_rng(0)
    draws = [draw_truth(post, prior, rng) for _ in range(20)]
    for name in post.names:
        values = {round(float(getattr(d, name)), 9) for d in draws}
        assert len(values) > 1, f"{name} never varies over the draws"
    pinned = post.model_copy(update={"cov": (np.asarray(post.cov) * 0.0).tolist()})
    same = draw_truth(pinned, prior, rng)
    assert all(abs(getattr(same, n) - getattr(pinned.profile(prior), n)) < 1e-9 for n in post.names)


def test_a_simulated_search_bills_node_starts_as_the_truth_takes_them_and_learns_them(monkeypatch) -> None:
    """Issue 39 item 7: the simulated search decides on its belief but a node bills what the truth's loads take, and
    it records each start beside the believed one (as agent/verify.py does), so it learns slow starts as a run does.
    Against a truth whose cold loads are 5x slower than believed, the same search costs more."""
    import importlib

    forecast = importlib.import_module("worldtune.policies.search.forecast")
    state = search.initial_state(_goal(), all_offers("snapshot"))
    belief_truth = state.beliefs["H200"]
    slow = belief_truth.with_changes(load_gib_per_s_cold=belief_truth.load_gib_per_s_cold / 5)
    seen: list[search.Measurement] = []
    recorded = forecast.evidence.record

    def record(s: search.SearchState, m: search.Measurement) -> search.SearchState:
        seen.append(m)
        return recorded(s, m)

    monkeypatch.setattr(forecast.evidence, "record", record)
    costs = {}
    for name, truth in (("belief", belief_truth), ("slow loads", slow)):
        monkeypatch.setattr(forecast, "draw_truth", lambda post, prior, rng, truth=truth: truth)
        seen.clear()
        costs[name] = forecast.simulate(state, 1, np.random.default_rng(0))[0]
        first = seen[0]
        assert first.start_s is not None and first.start_predicted_s is not None
        ratio = first.start_s / first.start_predicted_s
        assert (ratio == 1.0) if name == "belief" else ratio > 2.0
    assert costs["slow loads"] > costs["belief"] * 1.05


def test_the_forecast_hands_nodes_over_as_the_search_it_forecasts_would(monkeypatch) -> None:
    """Without node reuse (`--no-reuse-nodes`) no live node changes plan or joins a run: the forecast hands nodes over
    with the state's setting, as agent/graph.decide and the rehearsal's twin do (it once always reused them)."""
    from worldtune.policies.search import lanes

    seen: list[bool] = []
    real = lanes.hand_over

    def spy(actions, live, reuse=True):  # type: ignore[no-untyped-def]
        seen.append(reuse)
        return real(actions, live, reuse)

    monkeypatch.setattr(lanes, "hand_over", spy)
    state = search.initial_state(_goal(), all_offers("snapshot"))
    for reuse in (True, False):
        seen.clear()
        search.forecast(state.model_copy(update={"reuse_nodes": reuse}), runs=1)
        assert seen and set(seen) == {reuse}
