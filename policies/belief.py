"""The search's belief: a posterior over the performance model's parameters, per GPU type.

Each learnable Profile field is a coordinate: log(value), or log(1 - value) for a share hidden behind
compute (what is learnt is the exposed share). The prior is centred on the profile's value with scale
`Profile.uncertainty(name)` in those coordinates; the bounds are physical (no rate above the GPU's
datasheet peak, no bus bandwidth above its links, fractions in [0, 1]). policies/belief_fit.py fits it to
measurements (the MAP and its Laplace covariance, and the other explanations worth keeping). A plan's
predictive mean and sd come from the same model: finite-difference sensitivities d log latency / d
coordinate at the MAP, so a measurement moves the parameters the measured plan exercises in proportion to
how much each explains, and a plan whose mechanisms nothing measured stays as uncertain as the prior says.

New Profile fields slot in by adding a line to LEARNABLE; a line whose field the Profile lacks is skipped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field

from worldtune.policies import perf_model
from worldtune.tools.words.gpus import GpuSpec, get_gpu
from worldtune.tools.words.plan import Plan
from worldtune.tools.words.profile import Profile
from worldtune.tools.words.workload import Workload

Transform = Literal["log", "log1m"]
MODEL_ERROR = 0.01  # relative error of the model's form itself, per plan (what no parameter can explain)
FD_STEP = 1e-3  # finite-difference step in log coordinates
BUS_OVER_LINK = 2.0  # NCCL bus bandwidth can reach both directions of NVLink: at most 2x the per-direction rate


@dataclass(frozen=True)
class Learnable:
    """One learnable Profile field: how it is parameterised and its physical bounds.

    upper: a number, or a datasheet name ('bf16_peak', 'fp8_ratio', 'bus_peak') read from tools/words/gpus.py.
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


def physical_bounds(spec: GpuSpec) -> dict[str, tuple[float, float]]:
    """Each learnable field's physical bounds on this GPU, in its own units (the posterior's and the calibration's)."""
    return {p.name: (p.lower, _upper(spec, p.upper)) for p in LEARNABLE}


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
        xs: list[float] = list(self.mean) if x is None else x.tolist()  # the same floats float(v) would give
        exp = math.exp  # _from_x, inlined: the search builds this profile ~100,000 times a run
        update = {
            n: exp(v) if t == "log" else 1.0 - exp(v) for n, v, t in zip(self.names, xs, self.transforms, strict=True)
        }
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


_DUMPED: dict[int, tuple[BaseModel, str]] = {}  # id -> (the frozen model, its JSON), held so its id stays its own


def _dumped(model: BaseModel) -> str:
    """A frozen model's JSON, computed once per object (a profile's is ~30 us; the search keys every prediction by
    its profile and workload, tens of thousands of times a run)."""
    found = _DUMPED.get(id(model))
    if found is not None and found[0] is model:
        return found[1]
    if len(_DUMPED) >= 256:
        _DUMPED.clear()
    text = model.model_dump_json()
    _DUMPED[id(model)] = (model, text)
    return text


def predictive(post: Posterior, prior: Profile, workload: Workload, plan: Plan) -> Predictive:
    """The plan's prediction at the MAP and its sensitivities (cached: they depend on the MAP, not the covariance)."""
    key = (post.gpu, tuple(post.mean), str(plan), _dumped(workload), _dumped(prior))
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
        p = perf_model.timing(workload, plan, post.profile(prior, xi))
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
