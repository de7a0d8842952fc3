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

import bisect
import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from worldtune.tools.stats import (
    CI_LEVEL,
    CLAIM_CONFIDENCE,
    Interval,
    order_statistic_upper,
    quantile_interval,
    samples_needed,
)

# The one statistics module's rules (tools/stats.py), named here as the result's fields use them.
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
    clips_per_hour: float = Field(description="steady rate: answers per hour between the first and last answer")
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
        return PercentileClaim(name=name, q=q, value=None, estimate=None, claimable=False, n=0, needed=needed,
                               note="not claimable (n=0)")  # fmt: skip
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
    model: str = ""
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
        default_factory=dict, description="what else measured the same deployment meanwhile (tools/benchmark_lock.py)"
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


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q))


def _stage_stats(samples: list[dict[str, Any]]) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    per_stage: dict[str, list[float]] = {}
    for s in samples:
        for stage, value in (s.get("stage_durations") or {}).items():
            if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
                per_stage.setdefault(str(stage), []).append(float(value))
    mean = {k: float(np.mean(v)) for k, v in per_stage.items()}
    p50 = {k: _percentile(v, 50) for k, v in per_stage.items()}
    p99 = {k: _percentile(v, 99) for k, v in per_stage.items()}
    return mean, p50, p99


def fit_time(sample: dict[str, Any]) -> float | None:
    """The time the affine fit uses: the server's inference time when it reports one, else client latency."""
    value = sample.get("server_time_s")
    return float(value) if value is not None else sample.get("latency_s")


def steady_rate(ok: list[dict[str, Any]], duration: float) -> float:
    """Answers per second once the start-up transient is over, summed over endpoints.

    Per endpoint: answers after its first one over the time from its first to its last answer (the
    first request's full latency is start-up, not throughput). Replicas answer in step, so pooling them
    would count a pair of simultaneous answers as one interval.
    """
    by_endpoint: dict[str, list[float]] = {}
    for s in ok:
        by_endpoint.setdefault(str(s.get("endpoint", "")), []).append(float(s["done_at_model"]))
    rate = 0.0
    for ends in by_endpoint.values():
        ends.sort()
        if len(ends) >= 2 and ends[-1] > ends[0]:
            rate += (len(ends) - 1) / (ends[-1] - ends[0])
        elif duration > 0:
            rate += len(ends) / duration
    return rate


def _unqueued(sample: dict[str, Any]) -> bool:
    ahead = sample.get("queue_ahead")
    return int(ahead) == 0 if ahead is not None else int(sample.get("concurrency", 1)) == 1


def _alone(full: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Full runs that had the server to themselves: nothing of ours ahead when sent, and no other request to
    the same endpoint sent while they were in flight. The second condition matters: two requests sent in one
    instant reach the server in either order, so the one sent first (nothing ahead, by the client's count)
    may still have waited a whole clip behind the other, and its server time is then not a service time."""
    sends: dict[Any, list[float]] = {}
    for o in full:
        sends.setdefault(o.get("endpoint"), []).append(float(o["sent_at_model"]))
    for times in sends.values():
        times.sort()
    alone = []
    for s in full:
        if not (s.get("ok") and _unqueued(s)):
            continue
        times, sent, done = sends[s.get("endpoint")], float(s["sent_at_model"]), float(s["done_at_model"])
        # requests to its endpoint sent in [sent, done): itself, and any that could have overtaken it
        if bisect.bisect_left(times, done) - bisect.bisect_left(times, sent) <= 1:
            alone.append(s)
    return alone


def level_result(samples: list[dict[str, Any]], phase: str, concurrency: int, rate: float | None) -> LevelResult:
    """Throughput and latency of one load level from its samples (model seconds)."""
    ok = [s for s in samples if s.get("ok")]
    starts = [float(s["sent_at_model"]) for s in samples]
    ends = sorted(float(s["done_at_model"]) for s in samples if s.get("done_at_model") is not None)
    duration = (max(ends) - min(starts)) if ends and starts else 0.0
    rate_per_s = steady_rate(ok, duration)
    video_s = sum(float(s.get("video_seconds", 0.0)) for s in ok)
    return LevelResult(
        phase=phase,
        concurrency=concurrency,
        rate_per_hour=rate,
        steps=int(samples[0]["steps"]) if samples else 0,
        requests=len(samples),
        completed=len(ok),
        failed=len(samples) - len(ok),
        duration=duration,
        throughput_qps=len(ok) / duration if duration > 0 else 0.0,
        clips_per_hour=rate_per_s * 3600.0,
        video_seconds_per_wall_second=video_s / duration if duration > 0 else 0.0,
        latency=summarize([float(s["latency_s"]) for s in ok]),
        server_time=summarize([t for s in ok if (t := fit_time(s)) is not None]),
    )


def compute_result(
    samples: list[dict[str, Any]],
    *,
    benchmark_id: str = "",
    endpoints: Sequence[str] = (),
    model: str = "",
    steps: int = 0,
    time_scale: float = 1.0,
    wall_duration: float = 0.0,
) -> BenchmarkResult:
    """Build the Result from stored samples (works on a partial set after a crash, too)."""
    by_phase: dict[str, list[dict[str, Any]]] = {}
    for s in samples:
        by_phase.setdefault(str(s.get("phase", "full")), []).append(s)
    notes: list[str] = []

    full = [s for s in by_phase.get("full", [])]
    full_ok = [s for s in full if s.get("ok")]
    fit, probes, predicted, measured, error = _probe_fit(by_phase.get("probe", []), full, steps, notes)
    levels = _levels(full, by_phase.get("poisson", []))
    latency = summarize([float(s["latency_s"]) for s in full_ok])
    server = summarize([t for s in full_ok if (t := fit_time(s)) is not None])
    memory = [float(s["peak_memory_mb"]) for s in full_ok if s.get("peak_memory_mb") is not None]
    stage_mean, stage_p50, stage_p99 = _stage_stats(full_ok)
    full_levels = [lv for lv in levels if lv.phase == "full"]
    duration = sum(lv.duration for lv in full_levels)
    measured_all = [s for s in samples if s.get("phase") in ("probe", "full", "poisson")]
    failures = Counter(str(s.get("error_kind") or "unknown") for s in measured_all if not s.get("ok"))
    claims = {}
    for name, claim in latency.percentiles.items():
        claims[name] = f"{claim.value:.3f}" if claim.value is not None else (claim.note or "not claimable")
    best = max(full_levels, key=lambda lv: lv.clips_per_hour, default=None)
    return BenchmarkResult(
        duration=duration,
        completed_requests=len(full_ok),
        failed_requests=len(full) - len(full_ok),
        throughput_qps=len(full_ok) / duration if duration > 0 else 0.0,
        latency_mean=latency.mean,
        latency_median=latency.median,
        latency_p50=latency.value("p50"),
        latency_p90=latency.value("p90"),
        latency_p95=latency.value("p95"),
        latency_p99=latency.value("p99"),
        peak_memory_mb_max=max(memory) if memory else None,
        peak_memory_mb_mean=float(np.mean(memory)) if memory else None,
        peak_memory_mb_median=float(np.median(memory)) if memory else None,
        stage_durations_mean=stage_mean,
        stage_durations_p50=stage_p50,
        stage_durations_p99=stage_p99,
        benchmark_id=benchmark_id,
        endpoints=list(endpoints),
        model=model,
        steps=steps,
        time_scale=time_scale,
        wall_duration=wall_duration,
        per_step_s=fit.per_step_s if fit else None,
        fixed_s=fit.fixed_s if fit else None,
        fit=fit,
        predicted_full_latency_s=predicted,
        measured_full_server_time_s=measured,
        prediction_error_rel=error,
        latency=latency,
        server_time=server,
        latency_ci=latency.mean_ci,
        clips_per_hour=best.clips_per_hour if best else None,
        video_seconds_per_wall_second=best.video_seconds_per_wall_second if best else None,
        failures_by_kind=dict(sorted(failures.items())),
        claims=claims,
        levels=levels,
        probes=probes,
        samples=len(samples),
        notes=notes,
    )


def _probe_fit(
    probe: list[dict[str, Any]], full: list[dict[str, Any]], steps: int, notes: list[str]
) -> tuple[AffineFit | None, dict[str, Any], float | None, float | None, float | None]:
    """The affine fit from the short-step probes, checked against the full-step runs that had the server to
    themselves (server time = service time: what the fit should predict): fit, probes, predicted, measured, error."""
    probe_ok = [s for s in probe if s.get("ok") and fit_time(s) is not None]
    fit = fit_affine([(int(s["steps"]), float(fit_time(s) or 0.0)) for s in probe_ok])
    probes = {
        str(k): summarize([float(fit_time(s) or 0.0) for s in probe_ok if int(s["steps"]) == k])
        for k in sorted({int(s["steps"]) for s in probe_ok})
    }
    alone = [t for s in _alone(full) if (t := fit_time(s)) is not None]
    predicted = fit.predict(steps) if fit and steps else None
    measured = float(np.mean(alone)) if alone else None
    error = (predicted - measured) / measured if predicted is not None and measured else None
    if fit is None and probe_ok:
        notes.append("probes used one step count only: no affine fit")
    return fit, probes, predicted, measured, error


def _levels(full: list[dict[str, Any]], poisson: list[dict[str, Any]]) -> list[LevelResult]:
    """One result per closed-loop concurrency of the full runs, and one for the open-loop Poisson run."""
    levels = [
        level_result([s for s in full if int(s.get("concurrency", 1)) == c], "full", c, None)
        for c in sorted({int(s.get("concurrency", 1)) for s in full})
    ]
    if poisson:
        rate = poisson[0].get("rate_per_hour")
        levels.append(level_result(poisson, "poisson", int(poisson[0].get("concurrency", 0)), rate))
    return levels
