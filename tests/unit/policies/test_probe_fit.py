"""A probe's fit and what it is worth: fit_noise against simulated probes, and the step counts a probe asks."""

from __future__ import annotations

import numpy as np
import pytest

from worldtune.policies import search
from worldtune.policies.search.candidates import fit_noise

FIXED, PER_STEP, CV = 25.0, 3.5, 0.02


def _simulated_sd(asked: tuple[int, ...], repeats: int, steps: int, trials: int = 20_000) -> tuple[float, ...]:
    """Empirical relative sds of (latency at `steps`, per-step, fixed) over simulated probes whose requests have
    noise CV of their latency, fitted by least squares as the agent fits them."""
    rng = np.random.default_rng(11)
    xs = np.repeat(np.asarray(asked, dtype=float), repeats)
    true = FIXED + xs * PER_STEP
    ys = true * (1 + CV * rng.standard_normal((trials, xs.size)))
    slope, intercept = np.polyfit(xs, ys.T, 1)
    latency = intercept + steps * slope
    truth = FIXED + steps * PER_STEP
    return float(latency.std() / truth), float(slope.std() / PER_STEP), float(intercept.std() / FIXED)


def _probe(asked: tuple[int, ...]) -> search.Measurement:
    points = [(s, FIXED + s * PER_STEP) for s in asked for _ in range(2)]
    return search.Measurement(
        key="k|tp8", kind="probe", per_step_s=PER_STEP, fixed_s=FIXED, repeats=2, probe_points=points
    )


@pytest.mark.parametrize("asked", [(4, 35), (4, 8), (8, 20)])
def test_fit_noise_is_the_simulated_spread_of_a_probes_fit(asked: tuple[int, int]) -> None:
    got = fit_noise(_probe(asked), 35, CV)
    want = _simulated_sd(asked, 2, 35)
    assert (got.latency, got.per_step, got.fixed) == pytest.approx(want, rel=0.05)


def test_a_probe_reads_the_latency_where_the_goal_is_not_extrapolated_from_short_steps() -> None:
    """The same four requests at 4 and 35 steps pin the 35-step latency several times better than at 4 and 8."""
    at_goal, short = (fit_noise(_probe(asked), 35, CV).latency for asked in ((4, 35), (4, 8)))
    assert at_goal == pytest.approx(CV / np.sqrt(2), rel=1e-6)  # the mean of two requests at 35 steps
    assert short > 3 * at_goal
    assert search.probe_steps(35) == (4, 35) and search.probe_steps(50) == (4, 50)
    assert search.probe_steps(6) == (3, 6) and search.probe_steps(1) == (1, 2)  # always two counts apart
