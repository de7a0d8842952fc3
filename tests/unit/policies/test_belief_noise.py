"""The belief's run-to-run noise: its measured prior, and what full runs' samples teach it."""

from __future__ import annotations

import numpy as np
import pytest

from worldtune.policies import belief_noise
from worldtune.policies.calibration import shipped_profile


def test_shipped_noise_is_the_measured_spread_with_its_basis() -> None:
    cv, _ = belief_noise.measured_noise()
    h200 = shipped_profile("H200")
    assert h200.noise_cv == cv
    assert h200.basis_of("noise_cv").kind == "measured"
    assert "H200-1gpu-2026-12-03.noise.json" in h200.basis_of("noise_cv").source
    assert belief_noise.prior_df(h200) == pytest.approx(belief_noise.PRIOR_DF, rel=1e-2)


def test_samples_with_more_noise_widen_the_noise_and_its_quantile_narrows_to_normal() -> None:
    prior = shipped_profile("H200")
    rng = np.random.default_rng(3)
    noisy = [list(100 * np.exp(0.05 * rng.standard_normal(90)))]
    learned = belief_noise.learn(prior, [(noisy[0], 1.0)])
    assert learned.learned and learned.samples == 90
    assert 0.04 < learned.cv < 0.06
    assert belief_noise.prior(prior).quantile(95) > learned.quantile(95) > 1.64  # t with 4 df, then ~normal
    calm = belief_noise.learn(prior, [(list(100 * np.exp(0.0026 * rng.standard_normal(90))), 1.0)])
    assert calm.cv < 0.004


def test_a_profile_without_a_noise_basis_knows_its_noise() -> None:
    truth = shipped_profile("H200").model_copy(update={"basis": {}})
    assert belief_noise.learn(truth, [([100.0, 120.0, 80.0], 1.0)]).cv == truth.noise_cv


def test_a_probes_repeats_teach_the_noise_before_any_full_run() -> None:
    """The requests of one step count in a probe have one shape: their spread is the noise (policies/evidence.noise),
    so a GPU five times noisier than its prior shows after one probe, and a calm one stays calm."""
    from worldtune.policies import search
    from worldtune.policies.search import evidence
    from worldtune.tools.plans.offers import all_offers
    from worldtune.tools.words.goal import Goal
    from worldtune.tools.words.workload import anchor_workload

    goal = Goal(latency_bound_s=150, gpus=["H200"], capacities=["spot"], budget_usd=300,
                workload=anchor_workload("cosmos3-super"))  # fmt: skip
    state = search.initial_state(goal, all_offers())
    cand = next(c for c in search.candidates(state) if str(c.plan) == "cfg2-u4-vae8" and c.offer.gpu_count == 8)
    rng = np.random.default_rng(5)
    prior = evidence.noise(state, "H200")
    assert not prior.learned

    def probed(cv: float) -> belief_noise.Noise:
        points = [(s, (cand.fixed_s + s * cand.per_step_s) * float(np.exp(cv * rng.standard_normal())))
                  for s in search.probe_steps(35) for _ in range(search.PROBE_REPEATS)]  # fmt: skip
        m = search.Measurement(key=cand.key, kind="probe", per_step_s=cand.per_step_s, fixed_s=cand.fixed_s,
                               repeats=search.PROBE_REPEATS, probe_points=points)  # fmt: skip
        return evidence.noise(state.model_copy(update={"measurements": [m, m.model_copy()]}), "H200")

    noisy = probed(0.05)
    assert noisy.learned and noisy.samples == 2 * search.PROBE_REPEATS * len(search.probe_steps(35))
    assert noisy.cv > 4 * prior.cv and noisy.df > prior.df
    assert probed(0.002).cv < 2 * prior.cv
    no_points = search.Measurement(key=cand.key, kind="probe", per_step_s=cand.per_step_s, fixed_s=cand.fixed_s)
    assert not evidence.noise(state.model_copy(update={"measurements": [no_points]}), "H200").learned
