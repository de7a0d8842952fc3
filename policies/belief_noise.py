"""The belief's run-to-run noise: its prior (measured on a GPU, profiles/measured/), and what the samples teach.

A profile's `noise_cv` is the coefficient of variation of each part of a request's time (per-step and fixed, as
perf_model.noisy_parts draws them). Its `basis` entry says how it is known; its sigma (the relative one-sigma of
the cv) is the prior's strength: a scaled-inverse-chi-square prior on the variance with `df = 1 / (2 sigma^2)`
degrees of freedom (the relative spread of a standard deviation estimated from df degrees of freedom). Every group
of requests of one shape on a GPU type (a full run; a probe's repeats at one step count, so that a noisy GPU shows
before any full run) adds its samples: (n - 1) degrees of freedom of the log latency's variance, turned into the
parts' cv by the plan's split of fixed and per-step time, pooled per GPU type (the conjugate update). A percentile
of a request's latency is then the Student-t quantile with the posterior's degrees of freedom: wide while the
noise is barely known, the normal quantile once many samples say what it is. No basis entry: df infinite (the
noise is taken as known, as a truth in the rehearsals knows it).
"""

from __future__ import annotations

import functools
import json
import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.profile import ParamBasis, Profile

MEASURED_DIR = Path(__file__).parent / "profiles" / "measured"
H200_NOISE = MEASURED_DIR / "H200-1gpu-2026-12-03.noise.json"
NOISE_FORMAT = "worldtune-step-noise/1"
PRIOR_DF = 4.0  # one lent machine, one process shape: a weak prior, a single full run outweighs it many times
MAX_DF = 1e6  # above this the t quantile is the normal one


@dataclass(frozen=True)
class Noise:
    """The noise of one GPU type as the belief holds it: its cv, degrees of freedom, and what it was learned from."""

    cv: float
    df: float
    prior_cv: float
    prior_df: float
    samples: int = 0
    runs: int = 0

    @property
    def learned(self) -> bool:
        return self.samples > 0

    def quantile(self, percentile: float) -> float:
        """Standard units of the `percentile` (0-100) of one request's latency: Student-t with the posterior's df."""
        return _t_ppf(percentile / 100.0, self.df)

    def describe(self) -> str:
        if not self.learned:
            return f"noise cv {self.cv:.4f}: prior ({self.prior_df:g} df), nothing learned yet"
        return (
            f"noise cv {self.cv:.4f}: learned from {self.samples} samples in {self.runs} group(s) of one shape "
            f"(prior {self.prior_cv:.4f} with {self.prior_df:g} df; posterior {self.df:g} df)"
        )

    def basis(self) -> ParamBasis:
        """The basis entry a belief profile carries once the noise is learned: its df as the cv's sigma."""
        sigma = 1.0 / math.sqrt(2.0 * self.df) if self.df < MAX_DF else 0.0
        return ParamBasis(kind="fitted", source=self.describe(), sigma=sigma)


@functools.lru_cache(maxsize=256)
def _t_ppf(p: float, df: float) -> float:
    from scipy.stats import norm, t

    return float(norm.ppf(p) if df >= MAX_DF else t.ppf(p, df))


def prior_df(profile: Profile) -> float:
    """The prior's degrees of freedom, from the basis entry's sigma (none, or a sigma of 0: known exactly)."""
    entry = profile.basis.get("noise_cv")
    if entry is None or not entry.sigma:
        return MAX_DF
    return max(1.0, 1.0 / (2.0 * entry.sigma**2))


def prior(profile: Profile) -> Noise:
    df = prior_df(profile)
    return Noise(cv=profile.noise_cv, df=df, prior_cv=profile.noise_cv, prior_df=df)


def learn(profile: Profile, runs: Iterable[tuple[list[float], float]]) -> Noise:
    """The posterior noise of a GPU type: the profile's prior and the samples on it, pooled by group of one shape
    (a full run; a probe's requests at one step count).

    `runs`: each group's latencies and its plan's share ratio sqrt(f^2 + s^2) / (f + s) of fixed (f) and
    per-step (s) seconds, which turns the latency's cv into each part's (both parts carry noise of the same cv)."""
    start = prior(profile)
    if start.df >= MAX_DF:  # known exactly: nothing to learn
        return start
    ss, df, samples, count = start.df * start.cv**2, start.df, 0, 0
    for latencies, ratio in runs:
        values = [math.log(x) for x in latencies if x > 0]
        if len(values) < 2 or ratio <= 0:
            continue
        ss += (len(values) - 1) * statistics.variance(values) / ratio**2
        df += len(values) - 1
        samples += len(values)
        count += 1
    return Noise(cv=math.sqrt(ss / df), df=df, prior_cv=start.cv, prior_df=start.df, samples=samples, runs=count)


def share_ratio(fixed_s: float, per_step_total_s: float) -> float:
    """sqrt(f^2 + s^2) / (f + s): a request's latency cv over its parts' cv."""
    total = fixed_s + per_step_total_s
    return math.hypot(fixed_s, per_step_total_s) / total if total > 0 else 1.0


def measured_noise(path: Path = H200_NOISE) -> tuple[float, ParamBasis]:
    """The noise read off benchmarks/step_noise.py's raw file: the warm short generations' cv pooled over the
    processes (a request's mean step time from one generation to the next), with its basis."""
    if not path.is_file():
        raise InvalidInput("noise file", str(path), "a JSON file written by benchmarks/step_noise.py --out")
    data = json.loads(path.read_text())
    if data.get("format") != NOISE_FORMAT:
        raise InvalidInput("noise file", str(path), f"a file whose format is {NOISE_FORMAT!r}")
    s = data["summary"]
    cv = float(s["warm_generation_cv_pooled"])
    gens = sum(len(p["step_ms"]) - 1 for p in data["processes"])
    source = (
        f"measured: {path.name} warm_generation_cv_pooled ({gens} warm generations of "
        f"{data['steps_per_generation']} steps x {data['layers']} layers over {len(data['processes'])} fresh "
        f"processes; across processes {s['warm_generation_cv_across_processes']:.4f}, per step "
        f"{s['warm_step_cv_pooled']:.4f}; cold first generation {s['cold_generation_cv_across_processes']:.3f} "
        f"across processes, not in the figure); prior strength {PRIOR_DF:g} df"
    )
    return round(cv, 4), ParamBasis(kind="measured", source=source, sigma=round(1 / math.sqrt(2 * PRIOR_DF), 4))
