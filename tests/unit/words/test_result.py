"""Result statistics: percentile claims need enough samples, intervals cover, the affine fit recovers a line."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from worldtune.tools.results.compute import compute_result
from worldtune.tools.words.result import fit_affine, quantile_interval, samples_needed, summarize


def test_samples_needed_matches_mlperf() -> None:
    assert samples_needed(0.90) == 44
    assert samples_needed(0.95) == 90
    assert samples_needed(0.99) == 459


def test_percentiles_are_claimed_only_with_enough_samples() -> None:
    small = summarize(list(np.linspace(100, 120, 43)))
    assert small.value("p90") is None
    assert small.percentiles["p90"].note == "not claimable (n=43 < 44)"
    assert small.percentiles["p90"].estimate is not None  # still visible for diagnosis
    assert small.value("p50") == pytest.approx(110.0)  # the median is always reported
    enough = summarize(list(np.linspace(100, 120, 44)))
    assert enough.value("p90") == pytest.approx(np.percentile(np.linspace(100, 120, 44), 90))
    assert enough.value("p99") is None and "n=44 < 459" in enough.percentiles["p99"].note


def test_mean_interval_covers_the_truth_most_of_the_time() -> None:
    rng = np.random.default_rng(3)
    covered = 0
    for _ in range(200):
        s = summarize(list(rng.normal(50.0, 5.0, size=10)))
        assert s.mean_ci is not None and s.mean_ci.low is not None and s.mean_ci.high is not None
        covered += s.mean_ci.low <= 50.0 <= s.mean_ci.high
    assert 0.88 <= covered / 200 <= 0.99


def test_quantile_interval_is_unbounded_when_data_cannot_bound_it() -> None:
    data = np.sort(np.arange(1.0, 11.0))
    interval = quantile_interval(data, 0.99)
    assert interval.high is None and interval.low is not None
    wide = quantile_interval(np.sort(np.arange(1.0, 1001.0)), 0.5)
    assert wide.low is not None and wide.high is not None and wide.low < 500.5 < wide.high


def test_affine_fit_recovers_fixed_and_per_step() -> None:
    rng = np.random.default_rng(0)
    points = [(s, 13.87 + s * 3.04 * (1 + 0.002 * rng.standard_normal())) for s in (4, 8) for _ in range(3)]
    fit = fit_affine(points)
    assert fit is not None
    assert fit.per_step_s == pytest.approx(3.04, rel=0.01)
    assert fit.fixed_s == pytest.approx(13.87, rel=0.02)
    assert fit.per_step_ci is not None and fit.per_step_ci.low is not None
    assert fit.per_step_ci.low < fit.per_step_s < (fit.per_step_ci.high or 0)
    assert fit.predict(35) == pytest.approx(13.87 + 35 * 3.04, rel=0.01)
    assert fit_affine([(4, 10.0), (4, 11.0)]) is None  # one step count cannot separate the parts


def _sample(seq: int, phase: str, steps: int, c: int, sent: float, done: float, **extra: Any) -> dict[str, Any]:
    base = {"seq": seq, "phase": phase, "steps": steps, "concurrency": c, "sent_at_model": sent, "done_at_model": done,
            "latency_s": done - sent, "server_time_s": done - sent - 1.0, "ok": True, "video_seconds": 7.875,
            "peak_memory_mb": 43000.0, "stage_durations": {"diffuse": steps * 3.0}}  # fmt: skip
    base.update(extra)
    return base


def test_compute_result_levels_fit_and_failures() -> None:
    samples = [
        _sample(0, "probe", 4, 1, 0, 26.0),
        _sample(1, "probe", 8, 1, 26, 64.0),
        _sample(2, "full", 35, 1, 64, 186.0),
        _sample(3, "full", 35, 1, 186, 308.0),
        # two clients: answers every 110 s after the first
        _sample(4, "full", 35, 2, 308, 430.0),
        _sample(5, "full", 35, 2, 308, 540.0),
        _sample(6, "full", 35, 2, 430, 650.0),
        _sample(7, "full", 35, 2, 540, 760.0, ok=False, error_kind="server_timeout", server_time_s=None),
    ]
    r = compute_result(samples, benchmark_id="bm-x", endpoints=["http://e"], model="cosmos3-super", steps=35)
    assert r.fit is not None
    # server times 25 s at 4 steps and 37 s at 8 steps: 3 s per step, 13 s fixed
    assert r.per_step_s == pytest.approx(3.0) and r.fixed_s == pytest.approx(13.0)
    assert r.completed_requests == 5 and r.failed_requests == 1
    assert r.failures_by_kind == {"server_timeout": 1}
    by_c = {lv.concurrency: lv for lv in r.levels}
    assert by_c[1].clips_per_hour == pytest.approx(3600 / 122.0)
    assert by_c[2].clips_per_hour == pytest.approx(3600 / 110.0)
    assert r.clips_per_hour == pytest.approx(3600 / 110.0)
    assert r.latency_p90 is None and r.claims["p90"].startswith("not claimable (n=5")
    assert r.latency_p50 == pytest.approx(r.latency_median)
    assert r.peak_memory_mb_max == 43000.0 and r.stage_durations_mean == {"diffuse": 105.0}
    flat = r.flat()
    keys = "duration completed_requests failed_requests throughput_qps latency_mean latency_median latency_p50"
    keys += " latency_p90 latency_p95 latency_p99 peak_memory_mb_max peak_memory_mb_mean peak_memory_mb_median"
    keys += " stage_durations_mean stage_durations_p50 stage_durations_p99 per_step_s fixed_s clips_per_hour"
    for key in keys.split():
        assert key in flat
    assert r.prediction_error_rel == pytest.approx((r.fit.predict(35) - 121.0) / 121.0)


def test_prediction_is_checked_against_unqueued_full_runs() -> None:
    # two replicas, one client each: nothing queued ahead, so their server times are service times
    samples = [
        _sample(0, "probe", 4, 1, 0, 26.0),
        _sample(1, "probe", 8, 1, 26, 64.0),
        _sample(2, "full", 35, 2, 64, 185.0, queue_ahead=0, endpoint="a"),
        _sample(3, "full", 35, 2, 64, 185.0, queue_ahead=0, endpoint="b"),
        _sample(4, "full", 35, 2, 64, 400.0, queue_ahead=1, endpoint="a"),  # queued: excluded
    ]
    r = compute_result(samples, steps=35)
    assert r.measured_full_server_time_s == pytest.approx(120.0)
    assert r.predicted_full_latency_s == pytest.approx(13.0 + 35 * 3.0)


def test_a_request_overtaken_at_the_server_is_not_taken_for_a_service_time() -> None:
    # CI under load: two clients on one endpoint send in one instant; the second reaches the server first, so
    # the first (nothing ahead by the client's count) waits a whole clip and reports 240 s, not 120 s
    samples = [
        _sample(0, "probe", 4, 1, 0, 26.0),
        _sample(1, "probe", 8, 1, 26, 64.0),
        _sample(2, "full", 35, 1, 64, 185.0, queue_ahead=0, endpoint="a"),
        _sample(3, "full", 35, 2, 185, 426.0, queue_ahead=0, endpoint="a"),  # overtaken: 240 s server time
        _sample(4, "full", 35, 2, 185, 306.0, queue_ahead=1, endpoint="a"),
        _sample(5, "full", 35, 2, 306, 547.0, queue_ahead=1, endpoint="a"),
    ]
    r = compute_result(samples, steps=35)
    assert r.measured_full_server_time_s == pytest.approx(120.0)
    assert r.prediction_error_rel == pytest.approx((118.0 - 120.0) / 120.0)


def test_throughput_is_timed_on_the_engine_clock_where_the_server_reports_one() -> None:
    # a loaded client machine stretched its own clock (answers seen 110, 130, 125 s apart); the twin's engine
    # clock says 110 s between answers, its simulated service time: the rate is the engine's, and the result says so
    ends = [430.0, 540.0, 670.0, 795.0]
    engine = [420.0, 530.0, 640.0, 750.0]
    samples = [
        _sample(i, "full", 35, 2, end - 200.0, end, endpoint="a", server_done_at_s=at)
        for i, (end, at) in enumerate(zip(ends, engine, strict=True))
    ]
    r = compute_result(samples, steps=35)
    assert r.levels[0].clips_per_hour == pytest.approx(3600 / 110.0)
    assert any("twin's engine clock" in note for note in r.notes)
    # a real server sends no engine clock: the client's clock (wall x scale) is the measure, and no note claims more
    for s in samples:
        del s["server_done_at_s"]
    r = compute_result(samples, steps=35)
    assert r.levels[0].clips_per_hour == pytest.approx(3 * 3600 / (795.0 - 430.0))
    assert not any("engine clock" in note for note in r.notes)
    # one answer without it (mixed endpoints or servers): the client's clock for that endpoint, never a mix
    samples[0]["server_done_at_s"] = 420.0
    assert compute_result(samples, steps=35).levels[0].clips_per_hour == pytest.approx(3 * 3600 / (795.0 - 430.0))
