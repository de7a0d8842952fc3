"""Result: what a benchmark measured, computed from its samples, with honest statistics.

`BenchmarkResult` carries the flat keys of vLLM-Omni's diffusion benchmark where they exist
(`duration`, `completed_requests`, `failed_requests`, `throughput_qps`, `latency_mean`,
`latency_median`, `latency_p50/p90/p95/p99`, `peak_memory_mb_max/mean/median`, `stage_durations_*`)
plus what worldtune adds: per-step and fixed time from the affine fit `latency = fixed + steps x
per_step` and how well the short-step probes predicted the full runs, confidence intervals,
clips/hour, video seconds per wall second, failures by kind, per-level (concurrency / Poisson) rows,
and which percentiles the sample count can support.

A percentile is claimed only when there are enough samples for it (MLPerf's rule, REFERENCE.md
section 7): at 99% confidence with no violation, Pq needs n >= ln(0.01) / ln(q) samples (P90: 44,
P95: 90, P99: 459). Otherwise its value is null and the claim says "not claimable (n=..)". Mean and
median are always reported, with intervals (Student t for the mean, order statistics for quantiles).

Times are model seconds: a twin running at time scale K has its wall times multiplied by K, so a
rehearsal reads like the real thing; `time_scale` and `wall_duration` keep the raw facts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from worldtune.tools.words.stats import (
    CI_LEVEL,
    CLAIM_CONFIDENCE,
    Interval,
    order_statistic_upper,
    quantile_interval,
    samples_needed,
)

# The one statistics module's rules (tools/words/stats.py), named here as the result's fields use them.
CONFIDENCE = CLAIM_CONFIDENCE  # percentile claims (MLPerf)
QUANTILES: dict[str, float] = {"p50": 0.50, "p90": 0.90, "p95": 0.95, "p99": 0.99}


class PercentileClaim(BaseModel):
    """One percentile: its value, whether n supports claiming it, and its interval."""

    name: str
    q: float
    value: float | None = Field(description="null unless claimable")
    estimate: float | None = Field(description="the sample quantile, whatever n is (for diagnosis only)")
    claimable: bool
    n: int
    needed: int
    ci: Interval | None = None
    upper_bound: float | None = Field(
        default=None, description="order-statistic upper bound at the claim confidence; null unless claimable"
    )
    note: str = ""


class LatencySummary(BaseModel):
    """Mean, median and percentiles of one set of latencies (model seconds)."""

    n: int
    mean: float | None = None
    mean_ci: Interval | None = None
    median: float | None = None
    std: float | None = None
    min: float | None = None
    max: float | None = None
    percentiles: dict[str, PercentileClaim] = Field(default_factory=dict)

    def value(self, name: str) -> float | None:
        claim = self.percentiles.get(name)
        return claim.value if claim else None


class AffineFit(BaseModel):
    """latency = fixed + steps x per_step, fitted by least squares on the probe samples."""

    per_step_s: float
    fixed_s: float
    per_step_ci: Interval | None = None
    fixed_ci: Interval | None = None
    r2: float | None = None
    n: int
    steps_used: list[int]
    max_rel_residual: float

    def predict(self, steps: int) -> float:
        return self.fixed_s + steps * self.per_step_s


class LevelResult(BaseModel):
    """One load level: a closed loop at a concurrency, or open-loop Poisson arrivals at a rate."""

    phase: str
    concurrency: int
    rate_per_hour: float | None = None
    steps: int
    requests: int
    completed: int
    failed: int
    duration: float = Field(description="first send to last answer, model seconds")
    throughput_qps: float = Field(description="completed / duration (vLLM-Omni's definition)")
    clips_per_hour: float = Field(
        description="steady rate: answers per hour between the first and last answer, on the server's clock where "
        "it reports one (the twin's engine clock, simulated), else the client's (wall time x time_scale)"
    )
    video_seconds_per_wall_second: float
    latency: LatencySummary
    server_time: LatencySummary


def summarize(values: Sequence[float], confidence: float = CONFIDENCE, ci_level: float = CI_LEVEL) -> LatencySummary:
    """Mean (t interval), median and the claimable percentiles (order-statistic intervals) of `values`."""
    from scipy import stats

    data = np.sort(np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float))
    n = int(data.size)
    if n == 0:
        return LatencySummary(
            n=0, percentiles={k: _claim(k, q, data, confidence, ci_level) for k, q in QUANTILES.items()}
        )
    mean = float(data.mean())
    std = float(data.std(ddof=1)) if n > 1 else 0.0
    mean_ci = None
    if n > 1:
        half = float(stats.t.ppf(0.5 + ci_level / 2, n - 1)) * std / math.sqrt(n)
        mean_ci = Interval(low=mean - half, high=mean + half, level=ci_level)
    return LatencySummary(
        n=n,
        mean=mean,
        mean_ci=mean_ci,
        median=float(np.median(data)),
        std=std,
        min=float(data[0]),
        max=float(data[-1]),
        percentiles={k: _claim(k, q, data, confidence, ci_level) for k, q in QUANTILES.items()},
    )


def _claim(name: str, q: float, data: np.ndarray, confidence: float, ci_level: float) -> PercentileClaim:
    n = int(data.size)
    needed = 1 if q <= 0.5 else samples_needed(q, confidence)  # P50 is always reported, like the mean
    if n == 0:
        return PercentileClaim(
            name=name, q=q, value=None, estimate=None, claimable=False, n=0, needed=needed, note="not claimable (n=0)"
        )
    estimate = float(np.percentile(data, q * 100))
    claimable = n >= needed
    return PercentileClaim(
        name=name,
        q=q,
        value=estimate if claimable else None,
        estimate=estimate,
        claimable=claimable,
        n=n,
        needed=needed,
        ci=quantile_interval(data, q, ci_level),
        upper_bound=order_statistic_upper(data.tolist(), q, confidence) if claimable and q > 0.5 else None,
        note="" if claimable else f"not claimable (n={n} < {needed})",
    )


def fit_affine(points: Sequence[tuple[int, float]], ci_level: float = CI_LEVEL) -> AffineFit | None:
    """Least-squares fit of latency = fixed + steps x per_step; None without two distinct step counts."""
    from scipy import stats

    steps = np.asarray([p[0] for p in points], dtype=float)
    latency = np.asarray([p[1] for p in points], dtype=float)
    if len(set(steps.tolist())) < 2:
        return None
    fit = stats.linregress(steps, latency)
    per_step, fixed = float(fit.slope), float(fit.intercept)
    predicted = fixed + per_step * steps
    rel = np.abs(latency - predicted) / np.maximum(np.abs(latency), 1e-12)
    n = int(steps.size)
    step_ci = fixed_ci = None
    if n > 2:
        t = float(stats.t.ppf(0.5 + ci_level / 2, n - 2))
        step_ci = Interval(low=per_step - t * fit.stderr, high=per_step + t * fit.stderr, level=ci_level)
        fixed_ci = Interval(low=fixed - t * fit.intercept_stderr, high=fixed + t * fit.intercept_stderr, level=ci_level)
    return AffineFit(
        per_step_s=per_step,
        fixed_s=fixed,
        per_step_ci=step_ci,
        fixed_ci=fixed_ci,
        r2=float(fit.rvalue**2) if n > 2 else None,
        n=n,
        steps_used=sorted({int(s) for s in steps}),
        max_rel_residual=float(rel.max()),
    )


class BenchmarkResult(BaseModel):
    """Everything one benchmark measured. Flat vLLM-Omni keys first, then worldtune's richer fields.

    The vLLM-Omni keys describe the full-step closed-loop runs (every concurrency level together):
    latency_* over their answered requests, throughput over their summed busy time. Per-level rows,
    the Poisson row, probes and the fit are in `levels` / `fit`.
    """

    # ---- vLLM-Omni diffusion benchmark keys -------------------------------------------------
    duration: float = 0.0
    completed_requests: int = 0
    failed_requests: int = 0
    throughput_qps: float = 0.0
    latency_mean: float | None = None
    latency_median: float | None = None
    latency_p50: float | None = None
    latency_p90: float | None = None
    latency_p95: float | None = None
    latency_p99: float | None = None
    peak_memory_mb_max: float | None = None
    peak_memory_mb_mean: float | None = None
    peak_memory_mb_median: float | None = None
    stage_durations_mean: dict[str, float] = Field(default_factory=dict)
    stage_durations_p50: dict[str, float] = Field(default_factory=dict)
    stage_durations_p99: dict[str, float] = Field(default_factory=dict)

    # ---- worldtune's richer fields ----------------------------------------------------------
    benchmark_id: str = ""
    endpoints: list[str] = Field(default_factory=list)
    model: str = Field(default="", description="the workload's model: what the requests asked and were predicted as")
    served_model: str | None = Field(
        default=None,
        description="what the server says it served (X-Model of the answered requests): a checkpoint path or Hugging "
        "Face id; None when no answer named one",
    )
    steps: int = 0
    time_scale: float = Field(default=1.0, description="wall times were multiplied by this (twin rehearsal)")
    wall_duration: float = Field(default=0.0, description="wall seconds of the whole benchmark")
    per_step_s: float | None = None
    fixed_s: float | None = None
    fit: AffineFit | None = None
    predicted_full_latency_s: float | None = Field(default=None, description="the fit's prediction at `steps`")
    measured_full_server_time_s: float | None = None
    prediction_error_rel: float | None = Field(default=None, description="(predicted - measured) / measured")
    latency: LatencySummary | None = None
    server_time: LatencySummary | None = None
    load: dict[str, Any] = Field(
        default_factory=dict, description="what else measured the same deployment meanwhile (tools/bench/lock.py)"
    )
    latency_ci: Interval | None = None
    clips_per_hour: float | None = Field(default=None, description="best steady rate over the closed-loop levels")
    video_seconds_per_wall_second: float | None = None
    failures_by_kind: dict[str, int] = Field(default_factory=dict)
    claims: dict[str, str] = Field(default_factory=dict, description="percentile -> value or 'not claimable (n=..)'")
    levels: list[LevelResult] = Field(default_factory=list)
    probes: dict[str, LatencySummary] = Field(default_factory=dict, description="server time per probe step count")
    samples: int = 0
    notes: list[str] = Field(default_factory=list)

    def flat(self) -> dict[str, Any]:
        """The flat JSON vLLM-Omni's benchmark writes, plus worldtune's scalar extras (stable keys)."""
        keys = [
            "duration",
            "completed_requests",
            "failed_requests",
            "throughput_qps",
            "latency_mean",
            "latency_median",
            "latency_p50",
            "latency_p90",
            "latency_p95",
            "latency_p99",
            "peak_memory_mb_max",
            "peak_memory_mb_mean",
            "peak_memory_mb_median",
            "stage_durations_mean",
            "stage_durations_p50",
            "stage_durations_p99",
            "benchmark_id",
            "model",
            "steps",
            "time_scale",
            "wall_duration",
            "per_step_s",
            "fixed_s",
            "predicted_full_latency_s",
            "measured_full_server_time_s",
            "prediction_error_rel",
            "clips_per_hour",
            "video_seconds_per_wall_second",
            "failures_by_kind",
            "claims",
            "samples",
        ]
        data = self.model_dump(mode="json")
        return {k: data[k] for k in keys}
