"""A benchmark's Result computed from its stored samples (works on a partial set after a crash, too): the
affine fit of the probes checked against the full runs that had the server to themselves, one row per level,
latency and server-time summaries, stage timings, memory, failures by kind and the percentile claims.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from worldtune.tools.words.result import (
    AffineFit,
    BenchmarkResult,
    LevelResult,
    fit_affine,
    summarize,
)
from worldtune.tools.words.sample import Sample


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q))


def _stage_stats(samples: list[Sample]) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    per_stage: dict[str, list[float]] = {}
    for s in samples:
        for stage, value in s.stage_durations.items():
            if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
                per_stage.setdefault(str(stage), []).append(float(value))
    mean = {k: float(np.mean(v)) for k, v in per_stage.items()}
    p50 = {k: _percentile(v, 50) for k, v in per_stage.items()}
    p99 = {k: _percentile(v, 99) for k, v in per_stage.items()}
    return mean, p50, p99


ENGINE_CLOCK_NOTE = (
    "closed-loop clips_per_hour from the twin's engine clock (its simulated stage times, model s), not from client "
    "wall time x time_scale: a simulation of the profile, timed as the server reports it"
)


def engine_clocked(ok: list[Sample]) -> bool:
    """Whether every answer carries the twin's engine clock (a real vLLM-Omni server sends none)."""
    return bool(ok) and all(s.server_done_at_s is not None for s in ok)


def steady_rate(ok: list[Sample], duration: float, engine_clock: bool = True) -> float:
    """Answers per second once the start-up transient is over, summed over endpoints.

    Per endpoint: answers after its first one over the time from its first to its last answer (the
    first request's full latency is start-up, not throughput). Replicas answer in step, so pooling them
    would count a pair of simultaneous answers as one interval. With `engine_clock` (closed loops), an answer's
    time is the server's own where every answer of the endpoint reports one (the twin's engine clock: a loaded
    client machine cannot stretch it), else the client's (wall time x the time scale): a real server's rate is
    measured in client wall time, and so is an open loop's, whose arrivals the client times.
    """
    by_endpoint: dict[str, list[Sample]] = {}
    for s in ok:
        by_endpoint.setdefault(s.endpoint, []).append(s)
    rate = 0.0
    for answers in by_endpoint.values():
        server = engine_clock and engine_clocked(answers)
        ends = sorted(float((s.server_done_at_s if server else s.done_at_model) or 0.0) for s in answers)
        if len(ends) >= 2 and ends[-1] > ends[0]:
            rate += (len(ends) - 1) / (ends[-1] - ends[0])
        elif duration > 0:
            rate += len(ends) / duration
    return rate


def _unqueued(sample: Sample) -> bool:
    return sample.queue_ahead == 0 if sample.queue_ahead is not None else sample.concurrency == 1


def _alone(full: list[Sample]) -> list[Sample]:
    """Full runs that had the server to themselves: nothing of ours ahead when sent, and no other request to
    the same endpoint sent while they were in flight. The second condition matters: two requests sent in one
    instant reach the server in either order, so the one sent first (nothing ahead, by the client's count)
    may still have waited a whole clip behind the other, and its server time is then not a service time."""
    sends: dict[str, list[float]] = {}
    for o in full:
        sends.setdefault(o.endpoint, []).append(o.sent_at_model)
    for times in sends.values():
        times.sort()
    alone = []
    for s in full:
        if not (s.ok and _unqueued(s)):
            continue
        times, sent, done = sends[s.endpoint], s.sent_at_model, float(s.done_at_model or 0.0)
        # requests to its endpoint sent in [sent, done): itself, and any that could have overtaken it
        if bisect.bisect_left(times, done) - bisect.bisect_left(times, sent) <= 1:
            alone.append(s)
    return alone


def level_result(samples: list[Sample], phase: str, concurrency: int, rate: float | None) -> LevelResult:
    """Throughput and latency of one load level from its samples (model seconds)."""
    ok = [s for s in samples if s.ok]
    starts = [s.sent_at_model for s in samples]
    ends = sorted(s.done_at_model for s in samples if s.done_at_model is not None)
    duration = (max(ends) - min(starts)) if ends and starts else 0.0
    rate_per_s = steady_rate(ok, duration, engine_clock=phase == "full")
    video_s = sum(s.video_seconds for s in ok)
    return LevelResult(
        phase=phase,
        concurrency=concurrency,
        rate_per_hour=rate,
        steps=samples[0].steps if samples else 0,
        requests=len(samples),
        completed=len(ok),
        failed=len(samples) - len(ok),
        duration=duration,
        throughput_qps=len(ok) / duration if duration > 0 else 0.0,
        clips_per_hour=rate_per_s * 3600.0,
        video_seconds_per_wall_second=video_s / duration if duration > 0 else 0.0,
        latency=summarize([float(s.latency_s or 0.0) for s in ok]),
        server_time=summarize([t for s in ok if (t := s.server_time()) is not None]),
    )


def served_model(samples: Sequence[Sample], notes: list[str]) -> str | None:
    """The model the server says it served (the X-Model of the answered requests, the most frequent); a note when
    the answers named more than one (endpoints serving different checkpoints)."""
    named = Counter(s.served_model for s in samples if s.ok and s.served_model)
    if not named:
        return None
    if len(named) > 1:
        notes.append(f"the answers name {len(named)} served models ({', '.join(sorted(named))}), not one")
    return named.most_common(1)[0][0]


def compute_result(
    stored: Sequence[Sample | Mapping[str, Any]],
    *,
    benchmark_id: str = "",
    endpoints: Sequence[str] = (),
    model: str = "",
    steps: int = 0,
    time_scale: float = 1.0,
    wall_duration: float = 0.0,
) -> BenchmarkResult:
    """Build the Result from stored samples (works on a partial set after a crash, too)."""
    samples = [Sample.of(s) for s in stored]
    by_phase: dict[str, list[Sample]] = {}
    for s in samples:
        by_phase.setdefault(s.phase, []).append(s)
    notes: list[str] = []

    full = [s for s in by_phase.get("full", [])]
    full_ok = [s for s in full if s.ok]
    fit, probes, predicted, measured, error = _probe_fit(by_phase.get("probe", []), full, steps, notes)
    levels = _levels(full, by_phase.get("poisson", []))
    latency = summarize([float(s.latency_s or 0.0) for s in full_ok])
    server = summarize([t for s in full_ok if (t := s.server_time()) is not None])
    memory = [s.peak_memory_mb for s in full_ok if s.peak_memory_mb is not None]
    stage_mean, stage_p50, stage_p99 = _stage_stats(full_ok)
    full_levels = [lv for lv in levels if lv.phase == "full"]
    duration = sum(lv.duration for lv in full_levels)
    measured_all = [s for s in samples if s.phase in ("probe", "full", "poisson")]
    failures = Counter(s.error_kind or "unknown" for s in measured_all if not s.ok)
    if engine_clocked(full_ok):
        notes.append(ENGINE_CLOCK_NOTE)
    claims = {}
    for name, claim in latency.percentiles.items():
        claims[name] = f"{claim.value:.3f}" if claim.value is not None else (claim.note or "not claimable")
    best = max(full_levels, key=lambda lv: lv.clips_per_hour, default=None)
    served = served_model(samples, notes)
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
        served_model=served,
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
    probe: list[Sample], full: list[Sample], steps: int, notes: list[str]
) -> tuple[AffineFit | None, dict[str, Any], float | None, float | None, float | None]:
    """The affine fit from the short-step probes, checked against the full-step runs that had the server to
    themselves (server time = service time: what the fit should predict): fit, probes, predicted, measured, error."""
    probe_ok = [s for s in probe if s.ok and s.server_time() is not None]
    fit = fit_affine([(s.steps, float(s.server_time() or 0.0)) for s in probe_ok])
    probes = {
        str(k): summarize([float(s.server_time() or 0.0) for s in probe_ok if s.steps == k])
        for k in sorted({s.steps for s in probe_ok})
    }
    alone = [t for s in _alone(full) if (t := s.server_time()) is not None]
    predicted = fit.predict(steps) if fit and steps else None
    measured = float(np.mean(alone)) if alone else None
    error = (predicted - measured) / measured if predicted is not None and measured else None
    if fit is None and probe_ok:
        notes.append("probes used one step count only: no affine fit")
    return fit, probes, predicted, measured, error


def _levels(full: list[Sample], poisson: list[Sample]) -> list[LevelResult]:
    """One result per closed-loop concurrency of the full runs, and one for the open-loop Poisson run."""
    levels = [
        level_result([s for s in full if s.concurrency == c], "full", c, None)
        for c in sorted({s.concurrency for s in full})
    ]
    if poisson:
        levels.append(level_result(poisson, "poisson", poisson[0].concurrency, poisson[0].rate_per_hour))
    return levels
