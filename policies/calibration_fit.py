"""Calibration's fitting machinery: a Profile's free numbers fitted to measurements by regularised least
squares (scipy).

Every free parameter has a prior (a value and a spread in log space) so a fit with few measurements
stays physical; measurements pull it from there. The observation kinds (a latency, per-step and fixed time,
an isolated operation's rate, a ratio of two plans) say what was measured; fit_profile fits the parameters
named in the priors and records each one's posterior basis. The same machinery fits the shipped profiles
to the published cells (policies/calibration.py), a GPU's micro-benchmarks (policies/gpu_calibration.py),
and lets the agent recalibrate after each benchmark.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any, Literal

import numpy as np

from worldtune.policies import perf_model
from worldtune.tools.words.plan import Plan
from worldtune.tools.words.profile import ParamBasis, Profile
from worldtune.tools.words.workload import Workload

# The fixed part other than the VAE decode (text encode, muxing, pre/post-processing) is fitted as one
# number and split by these shares (assumed); the VAE decode has its own basis (measured stand-in decoder,
# pinned by the published VAE patch-parallel cell through the tile model).
FIXED_SHARES = {"text_encode_s": 0.5, "mux_s": 0.5}
FREE_DEFAULT = (
    "linear_tflops",
    "attn_tflops",
    "link_gbps",
    "collective_latency_us",
    "half_rate_tokens",
    "fixed_s",
)
# Pseudo-parameters a fit may name besides Profile fields: the whole fixed part (its split kept), and the
# fixed part other than the VAE decode.
PSEUDO = ("fixed_s", "fixed_other_s")


Clock = Literal["server", "wall"]  # vLLM-Omni's stage time (X-Inference-Time-S), or a client's end-to-end time


def on_clock(prediction: perf_model.Prediction, clock: Clock) -> float:
    """The prediction on a cell's own clock: a fit compares like with like."""
    return prediction.server_s if clock == "server" else prediction.latency_s


@dataclass(frozen=True)
class Prior:
    value: float
    log_sigma: float  # spread in log space: 0.1 ~ +-10%


@dataclass(frozen=True)
class LatencyObs:
    """A measured latency of one request on its own clock: the server's stage time, or a client's wall time."""

    workload: Workload
    plan: Plan
    latency_s: float
    rel_sigma: float = 0.01
    label: str = ""
    clock: Clock = "wall"


@dataclass(frozen=True)
class StepObs:
    """Per-step and fixed time measured by short-step probes (affine fit of the server's time over steps)."""

    workload: Workload
    plan: Plan
    per_step_s: float
    fixed_s: float
    rel_sigma: float = 0.01
    label: str = ""


@dataclass(frozen=True)
class RateObs:
    """An effective rate of one operation measured in isolation at a token count."""

    op: str  # "linear" | "attention"
    tflops: float
    tokens: int
    rel_sigma: float = 0.01
    label: str = ""


@dataclass(frozen=True)
class RatioObs:
    """One plan's latency over another's measured in the same run (a dashboard's backend comparison): what
    the run says about the difference, free of what it says about the absolute level."""

    workload: Workload
    plan: Plan
    reference: Plan
    ratio: float
    rel_sigma: float = 0.01
    label: str = ""
    clock: Clock = "wall"


Observation = LatencyObs | StepObs | RateObs | RatioObs


def _fixed_total(profile: Profile) -> float:
    return profile.text_encode_s + profile.vae_decode_s + profile.mux_s


def _scaled(profile: Profile, keys: Sequence[str], total: float) -> dict[str, float]:
    """`keys` scaled together to sum to `total`, their split kept (the assumed shares where all are 0)."""
    current = sum(float(getattr(profile, k)) for k in keys)
    if current <= 0:
        shares = {k: FIXED_SHARES.get(k, 0.0) for k in keys}
        norm = sum(shares.values()) or 1.0
        return {k: total * shares[k] / norm for k in keys}
    return {k: float(getattr(profile, k)) * total / current for k in keys}


def _apply(profile: Profile, names: Sequence[str], values: Sequence[float]) -> Profile:
    changes: dict[str, Any] = {}
    for name, value in zip(names, values, strict=True):
        if name == "fixed_s":
            changes.update(_scaled(profile, ("text_encode_s", "vae_decode_s", "mux_s"), value))
        elif name == "fixed_other_s":
            changes.update(_scaled(profile, ("text_encode_s", "mux_s"), value))
        else:
            changes[name] = value
    return profile.model_copy(update=changes)


def _current(profile: Profile, name: str) -> float:
    if name == "fixed_s":
        return _fixed_total(profile)
    if name == "fixed_other_s":
        return profile.text_encode_s + profile.mux_s
    return float(getattr(profile, name))


def predict_obs(obs: Observation, profile: Profile) -> list[tuple[float, float, float]]:
    """(predicted, measured, relative sigma) pairs for one observation."""
    if isinstance(obs, RateObs):
        peak = profile.linear_tflops if obs.op == "linear" else profile.attn_tflops
        predicted = peak * obs.tokens / (obs.tokens + profile.half_rate_tokens)
        return [(predicted, obs.tflops, obs.rel_sigma)]
    prediction = perf_model.predict(obs.workload, obs.plan, profile)
    if isinstance(obs, RatioObs):
        reference = perf_model.predict(obs.workload, obs.reference, profile)
        return [(on_clock(prediction, obs.clock) / on_clock(reference, obs.clock), obs.ratio, obs.rel_sigma)]
    if isinstance(obs, LatencyObs):
        return [(on_clock(prediction, obs.clock), obs.latency_s, obs.rel_sigma)]
    return [
        (prediction.per_step_s, obs.per_step_s, obs.rel_sigma),
        (prediction.fixed_s, obs.fixed_s, obs.rel_sigma * 3),
    ]


def fit_profile(
    base: Profile,
    observations: Sequence[Observation],
    priors: dict[str, Prior],
    source: str,
) -> Profile:
    """Fit the parameters named in `priors` to the observations; returns a new profile with fit notes."""
    from scipy.optimize import least_squares  # imported here: only fitting needs scipy

    names = list(priors)
    x0 = np.log([priors[n].value for n in names])

    def residuals(x: np.ndarray) -> np.ndarray:
        profile = _apply(base, names, np.exp(x).tolist())
        out: list[float] = []
        for obs in observations:
            for predicted, measured, sigma in predict_obs(obs, profile):
                out.append(math.log(predicted / measured) / sigma)
        for i, name in enumerate(names):
            out.append((x[i] - math.log(priors[name].value)) / priors[name].log_sigma)
        return np.asarray(out)

    solution = least_squares(residuals, x0, method="trf")
    limits = physical_limits(base.gpu, names)
    lower, upper = (np.log([limits[n][k] for n in names]) for k in (0, 1))
    bounded = [n for n, x, lo, hi in zip(names, solution.x, lower, upper, strict=True) if not lo <= x <= hi]
    if bounded:  # the data pull a term past what the hardware can do: fit again within the physical limits
        start = np.clip(x0, lower + 1e-9, upper - 1e-9)
        solution = least_squares(residuals, start, method="trf", bounds=(lower, upper))
    fitted = _apply(base, names, np.exp(solution.x).tolist())
    fitted = fitted.model_copy(update={"basis": _posterior_basis(fitted, names, solution.jac, source)})
    for name in bounded:  # say so: such a term is where the physics stops it, not where the data put it
        at = fitted.basis.get(name)
        if at is not None:
            lo, hi = limits[name]
            note = f"; held at its physical limits ({lo:g}-{hi:g} on {base.gpu}): the cells asked for more"
            fitted = fitted.model_copy(
                update={"basis": fitted.basis | {name: at.model_copy(update={"source": at.source + note})}}
            )
    cells = []
    for obs in observations:
        for predicted, measured, _ in predict_obs(obs, fitted):
            cells.append(
                {
                    "label": obs.label,
                    "measured": round(measured, 4),
                    "predicted": round(predicted, 4),
                    "rel_error": round(predicted / measured - 1, 5),
                }
            )
    fit = {"method": "scipy least_squares on log-parameters with log-normal priors", "cells": cells}
    return fitted.model_copy(update={"source": source, "date": date.today().isoformat(), "fit": fit})


def physical_limits(gpu: str, names: Sequence[str]) -> dict[str, tuple[float, float]]:
    """What each fitted term can be on this GPU: the posterior's own physical bounds (policies/belief.py LEARNABLE: a
    rate never above the datasheet's dense BF16 peak, an efficiency never above 1, ...), and the link never above
    NVLink's per-direction peak; a term neither bounds (a pseudo-parameter such as fixed_other_s) only positive."""
    from worldtune.policies.belief import physical_bounds
    from worldtune.tools.words.gpus import get_gpu

    spec = get_gpu(gpu)
    known = physical_bounds(spec) | {"link_gbps": (0.5, spec.link_gbps)}
    return {n: known.get(n, (1e-6, 1e9)) for n in names}


def _posterior_basis(profile: Profile, names: Sequence[str], jac: np.ndarray, source: str) -> dict[str, ParamBasis]:
    """Each fitted parameter's basis after the fit: its one-sigma (log space) from the Gauss-Newton covariance;
    a measured or published term keeps its kind and says the fit refined it."""
    try:
        sigmas = np.sqrt(np.clip(np.diag(np.linalg.inv(jac.T @ jac)), 0.0, None))
    except np.linalg.LinAlgError:
        sigmas = np.full(len(names), np.nan)
    basis = dict(profile.basis)
    for name, sigma in zip(names, sigmas.tolist(), strict=True):
        fields: tuple[str, ...] = ("text_encode_s", "mux_s") if name == "fixed_other_s" else (name,)
        if name == "fixed_s":
            fields = ("text_encode_s", "vae_decode_s", "mux_s")
        for field in fields:
            before = basis.get(field)
            value = round(float(sigma), 4) if math.isfinite(sigma) else None
            if before is not None and before.kind in ("measured", "published"):
                basis[field] = before.model_copy(update={"source": f"{before.source}; refined by {source}"})
                if value is not None:
                    basis[field] = basis[field].model_copy(update={"sigma": min(value, before.relative_sigma)})
            else:
                basis[field] = ParamBasis(kind="fitted", source=source, sigma=value)
    return basis
