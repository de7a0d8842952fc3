"""Fitting the belief (policies/belief.py) to measurements: MAP, Laplace covariance and the other modes.

Measurements are log-normal around what `perf_model.predict` gives for the measured plan, with the model's
own error added (estimated from the residuals, empirical Bayes). The prior rows are Student-t in the
belief's coordinates, so data can overrule a wrong profile; the Laplace covariance at the MAP is Gaussian.
The MAP comes from scipy.optimize.least_squares within the belief's bounds, the covariance from the
Gauss-Newton (Laplace) approximation at it; refits from one- and two-coordinate restarts find the other
explanations of the same data, each kept as a mode weighted by its Laplace evidence.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field

from worldtune.policies import perf_model
from worldtune.policies.belief import MODEL_ERROR, Mode, Posterior, prior_posterior
from worldtune.tools.words.plan import Plan, PlanField
from worldtune.tools.words.profile import Profile
from worldtune.tools.words.workload import Workload

MODE_DISTANCE = 1.0  # two local MAPs closer than this (prior sigmas, every coordinate) are one mode
MODE_MIN_WEIGHT = 0.001  # an explanation under 0.1% of the MAP's weight is dropped
RESTART_SPAN = 4.0  # a restart searches one coordinate over +-4 in log space (x0.02 .. x55) within its bounds
RESTARTS = 3
RESTART_GRID = 25
RESTART_PAIR_GRID = 7
RESTART_MIN_MOVE = 1.5  # prior sigmas a one-coordinate explanation must move to count as a distinct hypothesis
PRIOR_DOF = 3.0  # the prior's tails: Student-t in log space, not Gaussian
MODEL_ERROR_WEIGHT = 3.0  # observations' worth of confidence in MODEL_ERROR as the prior of the model's error
MODEL_ERROR_FLOOR = 0.002


class Observation(BaseModel):
    """One measured quantity of one plan: per-step time, fixed time, or whole latency (model seconds)."""

    plan: PlanField
    workload: Workload
    quantity: Literal["per_step", "fixed", "latency"]
    value: float = Field(gt=0)
    rel_sigma: float = Field(gt=0, description="relative (log-space) one-sigma of this measurement")
    label: str = ""


def _quantity(p: perf_model.Prediction | perf_model.Timing, quantity: str) -> float:
    if quantity == "per_step":
        return p.per_step_s
    if quantity == "fixed":
        return p.fixed_s
    return p.latency_s


class _Data:
    """The observations of one fit, laid out once for the hundreds of evaluations its least squares make: each
    distinct (plan, workload) parsed once (a probe's two quantities are one timing), the logs of the measured
    values and the squared measurement sigmas as the residuals use them."""

    def __init__(self, prior: Profile, obs: list[Observation]) -> None:
        self.prior, self.obs = prior, obs
        pairs: dict[tuple[Plan, Workload], int] = {}
        self.rows: list[tuple[int, str, float]] = []  # (pair, quantity, log of the measured value)
        for o in obs:
            pair = pairs.setdefault((o.plan, o.workload), len(pairs))
            self.rows.append((pair, o.quantity, math.log(o.value)))
        self.pairs = list(pairs)
        self.sigma_sq = np.square([o.rel_sigma for o in obs])


def _log_errors(post: Posterior, data: _Data, x: np.ndarray) -> np.ndarray:
    profile = post.profile(data.prior, x)
    timings = [perf_model.timing(workload, plan, profile) for plan, workload in data.pairs]
    return np.asarray([math.log(max(_quantity(timings[i], q), 1e-9)) - value for i, q, value in data.rows])


def _residuals(post: Posterior, data: _Data, x: np.ndarray, model_error: float) -> np.ndarray:
    sigma = np.sqrt(data.sigma_sq + model_error**2)
    return np.concatenate([_log_errors(post, data, x) / sigma, _prior_residuals(post, x)])


def _prior_residuals(post: Posterior, x: np.ndarray) -> np.ndarray:
    """Student-t prior rows (PRIOR_DOF degrees of freedom, scale = the prior sigma) written as residuals:
    r^2 = nu log(1 + z^2 / nu), so r ~ z near the prior and a far move costs only logarithmically. A profile
    can be wrong by far more than its sigma (a slow node's all-to-all): the data must be able to say so."""
    z = (x - np.asarray(post.prior_mean)) / np.asarray(post.prior_sd)
    out: np.ndarray = np.sign(z) * np.sqrt(PRIOR_DOF * np.log1p(z**2 / PRIOR_DOF))
    return out


def fit(prior: Profile, obs: list[Observation], start: Posterior | None = None) -> Posterior:
    """MAP (bounded least squares on log coordinates) and Laplace covariance of one GPU type's parameters,
    plus the other explanations of the same data worth keeping (modes, weighted by their Laplace evidence)."""
    base = prior_posterior(prior)
    if not obs:
        return base
    lower, upper = np.asarray(base.lower), np.asarray(base.upper)
    x0 = np.asarray(start.mean if start is not None and start.names == base.names else base.mean)
    x0 = np.clip(x0, lower + 1e-9, upper - 1e-9)
    model_error = start.model_error if start is not None else MODEL_ERROR
    data = _Data(prior, obs)
    found = [_solve(base, data, x0, model_error)]
    # A local fit can explain a far-off mechanism by small moves of many others (the gradient of a fast link's
    # share is tiny at the prior), and one measurement can often be explained in more than one way: fit again
    # from starts where one relevant coordinate alone explains the data, and keep every distinct mode.
    starts = _restarts(base, data, found[0], model_error)
    if start is not None and start.names == base.names:  # explanations the last fit kept stay in the running
        starts += [np.clip(np.asarray(m.mean), lower + 1e-9, upper - 1e-9) for m in start.alternatives]
    for xs in starts:
        found.append(_solve(base, data, xs, model_error))
    main = min(found, key=lambda r: r.cost)
    model_error = _model_error(_log_errors(base, data, main.x), obs)
    modes = _modes(base, data, found, model_error)
    best = modes[0]
    alternatives = [m for m in modes[1:] if m.weight >= MODE_MIN_WEIGHT * best.weight]
    total = best.weight + sum(m.weight for m in alternatives)
    return base.model_copy(
        update={
            "mean": best.mean,
            "cov": best.cov,
            "observations": len(obs),
            "cost": best.cost,
            "model_error": model_error,
            "weight": best.weight / total,
            "alternatives": [m.model_copy(update={"weight": m.weight / total}) for m in alternatives],
        }
    )


def _solve(base: Posterior, data: _Data, x: np.ndarray, e: float) -> Any:
    from scipy.optimize import least_squares

    lower, upper = np.asarray(base.lower), np.asarray(base.upper)
    return least_squares(
        lambda v: _residuals(base, data, v, e), x, bounds=(lower, upper), x_scale=np.asarray(base.prior_sd)
    )


def _modes(base: Posterior, data: _Data, found: list[Any], e: float) -> list[Mode]:
    """Distinct local MAPs refitted at the model error e, best first, each weighted by its Laplace evidence
    exp(-cost) sqrt(det cov) (unnormalised; the caller normalises)."""
    sd = np.asarray(base.prior_sd)
    modes: list[Mode] = []
    for r in sorted(found, key=lambda r: r.cost):
        if any(np.max(np.abs(r.x - np.asarray(m.mean)) / sd) < MODE_DISTANCE for m in modes):
            continue
        r = _solve(base, data, r.x, e)
        if any(np.max(np.abs(r.x - np.asarray(m.mean)) / sd) < MODE_DISTANCE for m in modes):
            continue
        jac = np.asarray(r.jac)
        cov = np.linalg.pinv(jac.T @ jac, hermitian=True)  # Gauss-Newton / Laplace; prior rows keep it full rank
        _, logdet = np.linalg.slogdet(cov)
        modes.append(Mode(mean=r.x.tolist(), cov=cov.tolist(), cost=float(r.cost), weight=-float(r.cost) + logdet / 2))
    top = max(m.weight for m in modes)
    modes = [m.model_copy(update={"weight": math.exp(m.weight - top)}) for m in modes]
    return sorted(modes, key=lambda m: -m.weight)


def _restarts(base: Posterior, data: _Data, result: Any, model_error: float) -> list[Any]:
    """Starts for refits, one per hypothesis: from the prior, each coordinate the data depend on alone fitted over
    a wide range (a grid, then a bounded scalar search), and each pair of the coordinates that had to move far
    (a coarse 2-D grid: a mechanism hidden behind a max(), like ring passing under attention, only shows once a
    second one moves with it). The best RESTARTS one-coordinate and RESTARTS pair starts are returned."""
    from scipy.optimize import minimize_scalar

    lower, upper = np.asarray(base.lower), np.asarray(base.upper)
    mean, sd = np.asarray(base.mean, dtype=float), np.asarray(base.prior_sd)
    relevant = [int(i) for i in np.flatnonzero(np.abs(np.asarray(result.jac)[: len(data.obs)]).max(axis=0) > 1e-9)]

    def cost(x: np.ndarray) -> float:
        return 0.5 * float(np.sum(_residuals(base, data, x, model_error) ** 2))

    def span(i: int) -> tuple[float, float]:
        return max(lower[i] + 1e-9, mean[i] - RESTART_SPAN), min(upper[i] - 1e-9, mean[i] + RESTART_SPAN)

    singles: list[tuple[float, np.ndarray]] = []
    far: list[int] = []
    for i in relevant:
        x = mean.copy()

        def along(v: float, i: int = i, x: np.ndarray = x) -> float:
            x[i] = v
            return cost(x)

        grid = np.linspace(*span(i), RESTART_GRID)  # the cost along one coordinate need not be convex: grid first
        k = int(np.argmin([along(float(v)) for v in grid]))
        near = (float(grid[max(k - 1, 0)]), float(grid[min(k + 1, len(grid) - 1)]))
        best = minimize_scalar(along, bounds=near, method="bounded", options={"xatol": 1e-3})
        start = mean.copy()
        start[i] = min(max(float(best.x), lower[i] + 1e-9), upper[i] - 1e-9)
        singles.append((float(best.fun), start))
        if abs(start[i] - mean[i]) >= RESTART_MIN_MOVE * sd[i]:
            far.append(i)
    pairs: list[tuple[float, np.ndarray]] = []
    for a, fi in enumerate(far):
        for fj in far[a + 1 :]:
            for vi in np.linspace(*span(fi), RESTART_PAIR_GRID):
                for vj in np.linspace(*span(fj), RESTART_PAIR_GRID):
                    x = mean.copy()
                    x[fi], x[fj] = vi, vj
                    pairs.append((cost(x), x))
    singles.sort(key=lambda t: t[0])
    pairs.sort(key=lambda t: t[0])
    return [x for _, x in singles[:RESTARTS]] + [x for _, x in pairs[:RESTARTS]]


def _model_error(errors: np.ndarray, obs: list[Observation]) -> float:
    """Empirical-Bayes estimate of the model's own error: residual scatter beyond the measurement noise, pooled
    with a prior of MODEL_ERROR worth MODEL_ERROR_WEIGHT observations (so a few lucky fits do not zero it)."""
    excess = np.maximum(np.square(errors) - np.square([o.rel_sigma for o in obs]), 0.0)
    pooled = (MODEL_ERROR_WEIGHT * MODEL_ERROR**2 + float(excess.sum())) / (MODEL_ERROR_WEIGHT + len(obs))
    return max(math.sqrt(pooled), MODEL_ERROR_FLOOR)
