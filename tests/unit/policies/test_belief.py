"""The search's posterior, its stopping probabilities, bad measurements, and the statistics module."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from worldtune.policies import belief, belief_fit, perf_model
from worldtune.policies.calibration import shipped_profile
from worldtune.policies.search import (
    STOP_LEVEL,
    Measurement,
    candidate_for,
    candidates,
    decide,
    full_requests,
    initial_state,
    recommendation,
    record,
)
from worldtune.tools.plans.offers import all_offers
from worldtune.tools.words import stats
from worldtune.tools.words.goal import Goal
from worldtune.tools.words.gpus import get_gpu
from worldtune.tools.words.plan import Plan
from worldtune.tools.words.workload import anchor_workload


def _goal(**changes: object) -> Goal:
    base: dict[str, object] = {
        "objective": "min_cost_per_clip", "workload": anchor_workload(), "latency_bound_s": 150,
        "gpus": ["H200"], "capacities": ["on-demand"], "budget_usd": 300,
    }  # fmt: skip
    base.update(changes)
    return Goal.model_validate(base)


def _probe_obs(truth_plan: str, truth: object) -> list[belief_fit.Observation]:
    wl = anchor_workload()
    p = perf_model.predict(wl, Plan.parse(truth_plan), truth)  # type: ignore[arg-type]
    return [
        belief_fit.Observation(plan=truth_plan, workload=wl, quantity="per_step", value=p.per_step_s, rel_sigma=0.003),
        belief_fit.Observation(plan=truth_plan, workload=wl, quantity="fixed", value=p.fixed_s, rel_sigma=0.003),
    ]


def _value(post: belief.Posterior, name: str) -> float:
    i = post.names.index(name)
    return belief._from_x(post.mean[i], post.transforms[i])


def test_posterior_moves_the_mechanism_the_plan_exercises_and_not_the_others() -> None:
    prior = shipped_profile("H200")
    truth = prior.with_changes(a2a_gbps=60.0)  # all-to-all slow; all-reduce and all-gather as believed
    # u8 alone could be slow compute, small work running less efficiently, or a slow all-to-all: 1gpu pins the
    # rates. Ulysses probes alone still leave two explanations (a slow all-to-all, or the half-rate curve of
    # small per-GPU work): the posterior must keep the true one among its weighted modes, not drop it.
    post = belief_fit.fit(prior, _probe_obs("1gpu", truth) + _probe_obs("u2", truth) + _probe_obs("u8", truth))
    a2a = post.names.index("a2a_gbps")
    slow = [m for m in post.modes() if math.exp(m.mean[a2a]) < 0.5 * prior.bandwidth("a2a") / 1e9]
    assert slow and max(m.weight for m in slow) >= 0.1  # Ulysses exercised a2a: that explanation is kept
    for mode in post.modes():  # compute was pinned by 1gpu in every explanation
        assert abs(mode.mean[post.names.index("attn_tflops")] - math.log(prior.attn_tflops)) < 0.02
    assert abs(math.log(_value(post, "allreduce_gbps") / (prior.bandwidth("allreduce") / 1e9))) < 0.05
    sd = post.sd()
    i = post.names.index("allreduce_gbps")
    assert sd[i] > 0.95 * post.prior_sd[i]  # a TP mechanism nothing measured keeps its prior uncertainty


def test_bounds_hold_no_rate_above_the_datasheet_peak() -> None:
    prior = shipped_profile("H200")
    truth = prior.with_changes(linear_tflops=5000.0, attn_tflops=5000.0)  # an impossible truth
    post = belief_fit.fit(prior, _probe_obs("1gpu", truth))
    peak = get_gpu("H200").bf16_tflops
    assert _value(post, "linear_tflops") <= peak * (1 + 1e-9) and _value(post, "attn_tflops") <= peak * (1 + 1e-9)
    for lo, x, hi in zip(post.lower, post.mean, post.upper, strict=True):
        assert lo - 1e-12 <= x <= hi + 1e-12


def test_unmeasured_mechanism_candidate_keeps_prior_level_uncertainty() -> None:
    goal = _goal()
    state = initial_state(goal, all_offers("snapshot"))
    key = next(c.key for c in candidates(state) if str(c.plan) == "u8")
    cand = candidate_for(state, key)
    m = Measurement(key=key, kind="probe", per_step_s=cand.per_step_s, fixed_s=cand.fixed_s)
    state = record(state, m)
    after = {str(c.plan): c for c in candidates(state)}
    assert after["u8"].stage == "probed" and after["u8"].sigma < 0.01
    post = state.posterior("H200")
    i = post.names.index("allreduce_gbps")
    assert post.sd()[i] > 0.95 * post.prior_sd[i]  # nothing measured TP's all-reduce
    g = belief.predictive(post, state.beliefs["H200"], goal.workload, Plan.parse("tp8")).grad_latency
    prior_level = abs(g[i]) * post.prior_sd[i]  # what the prior alone says about tp8's all-reduce share
    assert prior_level > 0.005 and after["tp8"].sigma >= 0.95 * prior_level
    assert after["tp8"].sigma > 2 * after["u8"].sigma


def test_stopping_probability_on_a_constructed_case() -> None:
    goal = _goal()
    state = initial_state(goal, all_offers("snapshot"))
    ranked = candidates(state)
    top = ranked[0]
    lat = top.latency_s
    n = full_requests(goal)
    # the best predicted candidate measured fully, as predicted: nothing else is likely to beat it by 3%...
    rng = np.random.default_rng(0)
    m = Measurement(key=top.key, kind="full", latencies_s=list(lat * (1 + 0.002 * rng.standard_normal(n))),
                       requested=n)  # fmt: skip
    done = record(state, m)
    d = decide(done, margin=0.5)
    assert d.stop_kind == "converged" and d.p_beaten is not None and d.p_beaten < STOP_LEVEL
    # ...while with no margin at all the unmeasured near-equals keep the probability above the level: not converged
    d0 = decide(done, margin=0.0)
    assert d0.stop_kind != "converged" and d0.p_beaten is not None and d0.p_beaten >= STOP_LEVEL


def test_infeasible_goal_ends_infeasible_with_nearest_options() -> None:
    state = initial_state(_goal(latency_bound_s=20), all_offers("snapshot"))
    d = decide(state)
    assert d.stop_kind == "infeasible" and not d.actions and d.p_feasible is not None and d.p_feasible < 0.05
    assert d.nearest and all(o.would_meet_s > 20 and o.usd_per_clip > 0 for o in d.nearest)
    assert d.nearest[0].latency_q_s <= min(c.latency_q_s for c in candidates(state)) * 1.05
    assert "nearest" in (d.stop_reason or "")


def test_a_full_run_with_a_killed_engine_is_retried_then_rejected_not_verified() -> None:
    goal = _goal()
    state = initial_state(goal, all_offers("snapshot"))
    top = candidates(state)[0]
    n = full_requests(goal)
    broken = Measurement(key=top.key, kind="full", latencies_s=[top.latency_s], requested=n, failed_requests=n - 1,
                            engine_problem="deployment d1 is failed")  # fmt: skip
    once = record(state, broken)
    assert recommendation(once) is None and top.key in once.retry and once.rejected
    retry = decide(once).actions[0]
    assert retry.key == top.key and retry.redeploy and retry.needs_deploy and retry.kind == "full"
    twice = record(once, broken)
    assert recommendation(twice) is None and top.key in twice.failed and "rejected 2 times" in twice.failures[top.key]
    assert all(a.key != top.key for a in decide(twice).actions)  # a failed candidate is never picked again


def test_statistics_module_matches_order_statistic_rules() -> None:
    assert [stats.samples_needed(q) for q in (0.90, 0.95, 0.99)] == [44, 90, 459]
    values = [float(v) for v in range(1, 91)]  # 90 samples: the largest bounds the P95 at 99%
    assert stats.order_statistic_upper(values, 0.95) == 90.0
    assert stats.order_statistic_upper(values[:89], 0.95) is None
    many = [float(v) for v in range(1, 201)]  # 200 samples: rank k is the smallest with P(Bin(200,.95) <= k-1) >= .99
    from scipy.stats import binom

    k = next(k for k in range(1, 201) if binom.cdf(k - 1, 200, 0.95) >= 0.99)
    assert stats.order_statistic_upper(many, 0.95) == float(k) and k < 200
    v = stats.percentile_verdict([100.0, 101.0, 99.0, 100.5, 100.2], 95)
    assert not v.claimable and v.upper is None and v.note == "not claimable (n=5 < 90 at 99% confidence)"
    assert v.parametric_name == "p95_upper_95conf_normal" and v.parametric_upper is not None
    assert v.parametric_upper > max(100.0, 101.0) and "normal" in v.parametric_assumption
    bound, text = v.bound()
    assert bound == v.parametric_upper and "p95_upper_95conf_normal" in text and "not claimable" in text


def test_estimate_shows_predicted_uncertainty_and_marks_plans_resting_on_assumed_terms(tmp_path: Path) -> None:
    from worldtune.tools.plans.estimate import estimate
    from worldtune.tools.words.profile import ParamBasis

    # FP8's linear speed-up has a measured basis in the shipped profile (issue 13); a profile that only assumes
    # it (as the shipped one did before) must mark FP8 plans as resting on that assumption
    shipped = shipped_profile("H200")
    basis = {**shipped.basis, "fp8_linear_speedup": ParamBasis(kind="assumed", source="no FP8 measurement")}
    assumed = shipped.with_changes(basis=basis, assumed=[*shipped.assumed, "fp8_linear_speedup"])
    assumed.dump(tmp_path / "H200-fp8-assumed.yaml")
    profile = str(tmp_path / "H200-fp8-assumed.yaml")
    plain = estimate(gpu="H200", plan="tp8", profile_path=profile)
    fp8 = estimate(gpu="H200", plan="tp8-fp8", profile_path=profile)
    for e in (plain, fp8):
        assert e.latency_sigma is not None and e.latency_sigma > 0.01 and e.latency_range_s is not None
        assert e.latency_s is not None and e.latency_range_s[0] < e.latency_s < e.latency_range_s[1]
    assert fp8.relies_on_assumed and "fp8_linear_speedup" in fp8.assumed_terms
    assert not plain.relies_on_assumed and "fp8_linear_speedup" not in plain.assumed_terms
    assert fp8.latency_sigma is not None and plain.latency_sigma is not None and fp8.latency_sigma > plain.latency_sigma
    measured = estimate(gpu="H200", plan="tp8-fp8")  # the shipped profile: measured, so not marked
    assert "fp8_linear_speedup" not in measured.assumed_terms
