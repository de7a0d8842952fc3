"""The search's belief: a posterior over the performance model's parameters, per GPU type.

Each learnable Profile field is a coordinate: log(value), or log(1 - value) for a share hidden behind
compute (what is learnt is the exposed share). The prior is centred on the profile's value with scale
`Profile.uncertainty(name)` in those coordinates (Student-t tails, so data can overrule a wrong profile;
the Laplace covariance at the MAP is Gaussian); the bounds are physical (no rate above
the GPU's datasheet peak, no bus bandwidth above its links, fractions in [0, 1]). Measurements are
log-normal around what `perf_model.predict` gives for the measured plan. The MAP comes from
scipy.optimize.least_squares with those bounds, the covariance from the Gauss-Newton (Laplace)
approximation at it. A plan's predictive mean and sd come from the same model: finite-difference
sensitivities d log latency / d coordinate at the MAP, so a measurement moves the parameters the
measured plan exercises in proportion to how much each explains, and a plan whose mechanisms nothing
measured stays as uncertain as the prior says.

New Profile fields slot in by adding a line to LEARNABLE; a line whose field the Profile lacks is skipped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field

from worldtune.policies import perf_model
from worldtune.tools.gpus import GpuSpec, get_gpu
from worldtune.tools.plan import Plan
from worldtune.tools.profile import Profile
from worldtune.tools.workload import Workload

Transform = Literal["log", "log1m"]
MODEL_ERROR = 0.01  # relative error of the model's form itself, per plan (what no parameter can explain)
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
FD_STEP = 1e-3  # finite-difference step in log coordinates
BUS_OVER_LINK = 2.0  # NCCL bus bandwidth can reach both directions of NVLink: at most 2x the per-direction rate


@dataclass(frozen=True)
class Learnable:
    """One learnable Profile field: how it is parameterised and its physical bounds.

    upper: a number, or a datasheet name ('bf16_peak', 'fp8_ratio', 'bus_peak') read from tools/gpus.py.
    """

    name: str
    lower: float
    upper: float | str
    transform: Transform = "log"


LEARNABLE: tuple[Learnable, ...] = (
    Learnable("linear_tflops", 10.0, "bf16_peak"),
    Learnable("attn_tflops", 10.0, "bf16_peak"),
    Learnable("half_rate_tokens", 1.0, 1e5),
    Learnable("fp8_linear_speedup", 1.0, "fp8_ratio"),
    Learnable("step_overhead_s", 1e-4, 10.0),
    Learnable("a2a_gbps", 0.5, "bus_peak"),
    Learnable("allreduce_gbps", 0.5, "bus_peak"),
    Learnable("allgather_gbps", 0.5, "bus_peak"),
    Learnable("collective_latency_us", 0.1, 500.0),  # NCCL in one NVLink node: tens of us per call, never ms
    Learnable("ring_overlap", 1e-3, 1.0, "log1m"),  # learnt as the exposed share 1 - overlap
    Learnable("hsdp_overlap", 1e-3, 1.0, "log1m"),
    Learnable("text_encode_s", 0.01, 600.0),
    Learnable("vae_decode_s", 0.01, 600.0),
    Learnable("mux_s", 0.01, 600.0),
    Learnable("vae_parallel_efficiency", 1e-3, 1.0),
    Learnable("guardrail_base_s", 0.01, 600.0),
    Learnable("guardrail_per_word_s", 1e-3, 60.0),
    Learnable("pipelined_s", 0.01, 600.0),
    # the mechanism terms of issue 13 (policies/perf_model.py), bounds as measured/argued there
    Learnable("ring_chunk_efficiency", 0.5, 1.0),
    Learnable("ring_merge_ms_per_gelem", 1e-3, 50.0),
    Learnable("ring_hop_latency_us", 0.01, 500.0),
    Learnable("ulysses_pack_ms_per_gb", 0.1, 5.0),
    Learnable("attn_fa_factor", 0.3, 1.3),
    Learnable("attn_cudnn_factor", 0.3, 1.3),
    Learnable("attn_fi_factor", 0.3, 1.3),
    Learnable("fp8_attn_speedup", 0.9, 2.0),
    Learnable("vae_tile_fixed_share", 1e-4, 0.3),
    Learnable("vae_tile_area_cost", 0.3, 2.0),
)


def _upper(spec: GpuSpec, upper: float | str) -> float:
    if isinstance(upper, float | int):
        return float(upper)
    return {
        "bf16_peak": spec.bf16_tflops,
        "fp8_ratio": spec.fp8_tflops / spec.bf16_tflops,
        "bus_peak": BUS_OVER_LINK * spec.link_gbps,
    }[upper]


def _value(profile: Profile, name: str) -> float:
    """The field's effective value (an unset collective bandwidth is the link's)."""
    collective = {"a2a_gbps": "a2a", "allreduce_gbps": "allreduce", "allgather_gbps": "allgather"}
    if name in collective:
        return profile.bandwidth(collective[name]) / 1e9
    return float(getattr(profile, name))


def _to_x(value: float, transform: Transform) -> float:
    return math.log(max(value, 1e-12)) if transform == "log" else math.log(max(1.0 - value, 1e-12))


def _from_x(x: float, transform: Transform) -> float:
    return math.exp(x) if transform == "log" else 1.0 - math.exp(x)


class Mode(BaseModel):
    """One explanation of the data: a local MAP, its Laplace covariance and its posterior weight."""

    mean: list[float]
    cov: list[list[float]]
    cost: float = 0.0
    weight: float = 1.0


class Posterior(BaseModel):
    """The belief about one GPU type: MAP and covariance in the learnable coordinates (JSON-serialisable)."""

    gpu: str
    names: list[str]
    transforms: list[Transform]
    prior_mean: list[float]
    prior_sd: list[float]
    lower: list[float]
    upper: list[float]
    mean: list[float]
    cov: list[list[float]]
    observations: int = 0
    model_error: float = Field(
        default=MODEL_ERROR, description="relative error of the model's form per plan, estimated from the residuals"
    )
    cost: float = Field(default=0.0, description="least-squares cost at the MAP (0.5 x sum of squared residuals)")
    weight: float = Field(default=1.0, description="posterior weight of the MAP's mode")
    alternatives: list[Mode] = Field(
        default_factory=list, description="other explanations of the same data still worth keeping, with weights"
    )

    def modes(self) -> list[Mode]:
        """Every mode, the MAP's first, weights summing to one."""
        return [Mode(mean=self.mean, cov=self.cov, cost=self.cost, weight=self.weight), *self.alternatives]

    def at(self, mode: Mode) -> Posterior:
        """This posterior centred on one of its modes (for that mode's predictions)."""
        return self.model_copy(update={"mean": mode.mean, "cov": mode.cov, "alternatives": [], "weight": 1.0})

    def sd(self) -> np.ndarray:
        return np.sqrt(np.diag(np.asarray(self.cov)))

    def profile(self, prior: Profile, x: np.ndarray | None = None) -> Profile:
        """The prior profile with the learnable fields set from coordinates x (the MAP if None).

        model_copy skips validation on purpose: the finite-difference steps may sit a hair past a bound.
        """
        xs = np.asarray(self.mean) if x is None else x
        update = {n: _from_x(float(v), t) for n, v, t in zip(self.names, xs, self.transforms, strict=True)}
        return prior.model_copy(update=update)

    def summary(self, top: int = 6) -> str:
        """The parameters that moved most from the prior (in prior sigmas), with their posterior sd."""
        mean, prior, psd, sd = (np.asarray(v) for v in (self.mean, self.prior_mean, self.prior_sd, self.sd()))
        z = (mean - prior) / psd
        order = np.argsort(-np.abs(z))[:top]
        parts = []
        for i in order:
            if abs(z[i]) < 0.5:
                continue
            value = _from_x(float(mean[i]), self.transforms[i])
            parts.append(f"{self.names[i]} {value:.4g} ({z[i]:+.1f} prior sd, ±{sd[i]:.0%})")
        return ", ".join(parts) or "as the prior"


def prior_posterior(prior: Profile) -> Posterior:
    """The belief before anything is measured on this GPU type."""
    spec = get_gpu(prior.gpu)
    names, transforms, mean, sd, lower, upper = [], [], [], [], [], []
    for p in LEARNABLE:
        if p.name not in Profile.model_fields:
            continue  # a field another version of the Profile has: nothing to learn here
        lo, hi = _to_x(p.lower, p.transform), _to_x(_upper(spec, p.upper), p.transform)
        lo, hi = min(lo, hi), max(lo, hi)
        x0 = min(max(_to_x(_value(prior, p.name), p.transform), lo), hi)
        names.append(p.name)
        transforms.append(p.transform)
        mean.append(x0)
        sd.append(_prior_sigma(prior, p.name))
        lower.append(lo)
        upper.append(hi)
    return Posterior(
        gpu=prior.gpu,
        names=names,
        transforms=transforms,
        prior_mean=mean,
        prior_sd=sd,
        lower=lower,
        upper=upper,
        mean=list(mean),
        cov=np.diag(np.square(sd)).tolist(),
    )


def _prior_sigma(prior: Profile, name: str) -> float:
    """Profile.uncertainty; a collective bandwidth the profile leaves unset follows link_gbps, and so is known
    as well as link_gbps is (the shipped fit's link was fitted on cells that exercise each collective)."""
    if name in COLLECTIVES and getattr(prior, name) is None and name not in prior.basis:
        return prior.uncertainty("link_gbps")
    return prior.uncertainty(name)


COLLECTIVES = ("a2a_gbps", "allreduce_gbps", "allgather_gbps")


class Observation(BaseModel):
    """One measured quantity of one plan: per-step time, fixed time, or whole latency (model seconds)."""

    plan: str
    workload: Workload
    quantity: Literal["per_step", "fixed", "latency"]
    value: float = Field(gt=0)
    rel_sigma: float = Field(gt=0, description="relative (log-space) one-sigma of this measurement")
    label: str = ""


def _quantity(p: perf_model.Prediction, quantity: str) -> float:
    if quantity == "per_step":
        return p.per_step_s
    if quantity == "fixed":
        return p.fixed_s
    return p.latency_s


def _log_errors(post: Posterior, prior: Profile, obs: list[Observation], x: np.ndarray) -> np.ndarray:
    profile = post.profile(prior, x)
    out = []
    for o in obs:
        predicted = _quantity(perf_model.predict(o.workload, Plan.parse(o.plan), profile), o.quantity)
        out.append(math.log(max(predicted, 1e-9)) - math.log(o.value))
    return np.asarray(out)


def _residuals(
    post: Posterior, prior: Profile, obs: list[Observation], x: np.ndarray, model_error: float
) -> np.ndarray:
    sigma = np.sqrt(np.square([o.rel_sigma for o in obs]) + model_error**2)
    data = _log_errors(post, prior, obs, x) / sigma
    return np.concatenate([data, _prior_residuals(post, x)])


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
    found = [_solve(base, prior, obs, x0, model_error)]
    # A local fit can explain a far-off mechanism by small moves of many others (the gradient of a fast link's
    # share is tiny at the prior), and one measurement can often be explained in more than one way: fit again
    # from starts where one relevant coordinate alone explains the data, and keep every distinct mode.
    starts = _restarts(base, prior, obs, found[0], model_error)
    if start is not None and start.names == base.names:  # explanations the last fit kept stay in the running
        starts += [np.clip(np.asarray(m.mean), lower + 1e-9, upper - 1e-9) for m in start.alternatives]
    for xs in starts:
        found.append(_solve(base, prior, obs, xs, model_error))
    main = min(found, key=lambda r: r.cost)
    model_error = _model_error(_log_errors(base, prior, obs, main.x), obs)
    modes = _modes(base, prior, obs, found, model_error)
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


def _solve(base: Posterior, prior: Profile, obs: list[Observation], x: np.ndarray, e: float) -> Any:
    from scipy.optimize import least_squares

    lower, upper = np.asarray(base.lower), np.asarray(base.upper)
    return least_squares(
        lambda v: _residuals(base, prior, obs, v, e), x, bounds=(lower, upper), x_scale=np.asarray(base.prior_sd)
    )


def _modes(base: Posterior, prior: Profile, obs: list[Observation], found: list[Any], e: float) -> list[Mode]:
    """Distinct local MAPs refitted at the model error e, best first, each weighted by its Laplace evidence
    exp(-cost) sqrt(det cov) (unnormalised; the caller normalises)."""
    sd = np.asarray(base.prior_sd)
    modes: list[Mode] = []
    for r in sorted(found, key=lambda r: r.cost):
        if any(np.max(np.abs(r.x - np.asarray(m.mean)) / sd) < MODE_DISTANCE for m in modes):
            continue
        r = _solve(base, prior, obs, r.x, e)
        if any(np.max(np.abs(r.x - np.asarray(m.mean)) / sd) < MODE_DISTANCE for m in modes):
            continue
        jac = np.asarray(r.jac)
        cov = np.linalg.pinv(jac.T @ jac, hermitian=True)  # Gauss-Newton / Laplace; prior rows keep it full rank
        _, logdet = np.linalg.slogdet(cov)
        modes.append(Mode(mean=r.x.tolist(), cov=cov.tolist(), cost=float(r.cost), weight=-float(r.cost) + logdet / 2))
    top = max(m.weight for m in modes)
    modes = [m.model_copy(update={"weight": math.exp(m.weight - top)}) for m in modes]
    return sorted(modes, key=lambda m: -m.weight)


def _restarts(base: Posterior, prior: Profile, obs: list[Observation], result: Any, model_error: float) -> list[Any]:
    """Starts for refits, one per hypothesis: from the prior, each coordinate the data depend on alone fitted over
    a wide range (a grid, then a bounded scalar search), and each pair of the coordinates that had to move far
    (a coarse 2-D grid: a mechanism hidden behind a max(), like ring passing under attention, only shows once a
    second one moves with it). The best RESTARTS one-coordinate and RESTARTS pair starts are returned."""
    from scipy.optimize import minimize_scalar

    lower, upper = np.asarray(base.lower), np.asarray(base.upper)
    mean, sd = np.asarray(base.mean, dtype=float), np.asarray(base.prior_sd)
    relevant = [int(i) for i in np.flatnonzero(np.abs(np.asarray(result.jac)[: len(obs)]).max(axis=0) > 1e-9)]

    def cost(x: np.ndarray) -> float:
        return 0.5 * float(np.sum(_residuals(base, prior, obs, x, model_error) ** 2))

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


@dataclass(frozen=True)
class Predictive:
    """A plan's predictive belief: log latency and log service time at the MAP and their sensitivities."""

    prediction: perf_model.Prediction
    log_latency: float
    log_service: float
    grad_latency: np.ndarray  # d log latency / d coordinate
    grad_service: np.ndarray

    def sd(self, cov: np.ndarray, model_error: float = MODEL_ERROR) -> float:
        """Relative (log-space) one-sigma of the latency: the parameters' share plus the model's own error."""
        return math.sqrt(float(self.grad_latency @ cov @ self.grad_latency) + model_error**2)


_CACHE: dict[tuple[object, ...], Predictive] = {}
_CACHE_SIZE = 20_000


def predictive(post: Posterior, prior: Profile, workload: Workload, plan: Plan) -> Predictive:
    """The plan's prediction at the MAP and its sensitivities (cached: they depend on the MAP, not the covariance)."""
    key = (post.gpu, tuple(post.mean), str(plan), workload.model_dump_json(), prior.model_dump_json())
    found = _CACHE.get(key)
    if found is None:
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.clear()
        found = _CACHE[key] = _predictive(post, prior, workload, plan)
    return found


def _predictive(post: Posterior, prior: Profile, workload: Workload, plan: Plan) -> Predictive:
    """The plan's prediction at the MAP and its finite-difference sensitivities to every coordinate."""
    x = np.asarray(post.mean)
    base = perf_model.predict(workload, plan, post.profile(prior, x))
    lat0, svc0 = math.log(base.latency_s), math.log(base.service_s)
    g_lat, g_svc = np.zeros(len(x)), np.zeros(len(x))
    for i in range(len(x)):
        # Step away from the bound the coordinate is nearest, so the step stays in the physical range.
        step = -FD_STEP if x[i] + FD_STEP > post.upper[i] else FD_STEP
        xi = x.copy()
        xi[i] += step
        p = perf_model.predict(workload, plan, post.profile(prior, xi))
        g_lat[i] = (math.log(p.latency_s) - lat0) / step
        g_svc[i] = (math.log(p.service_s) - svc0) / step
    return Predictive(base, lat0, svc0, g_lat, g_svc)


def informs(post: Posterior, grad: np.ndarray, noise: float, top: int = 3) -> list[str]:
    """The parameters a measurement with these sensitivities would narrow most (share of variance removed)."""
    cov = np.asarray(post.cov)
    var = float(grad @ cov @ grad) + noise**2
    gain = (cov @ grad) ** 2 / var / np.maximum(np.diag(cov), 1e-18)
    order = np.argsort(-gain)[:top]
    return [f"{post.names[i]} ({gain[i]:.0%} of its variance)" for i in order if gain[i] >= 0.05]
