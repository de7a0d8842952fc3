"""`worldtune bench` against real twin processes: it recovers the twin's profile and throughput, and loses nothing."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from worldtune.policies import perf_model
from worldtune.tools.backends.local import free_port
from worldtune.tools.bench.benchmark import get_benchmark
from worldtune.tools.plans.estimate import resolve_profile
from worldtune.tools.store.database import Store
from worldtune.tools.words.plan import Plan
from worldtune.tools.words.workload import anchor_workload

pytestmark = pytest.mark.integration

WORLDTUNE = [sys.executable, "-m", "worldtune.cli"]


@contextmanager
def twin(*args: str, replicas: int = 1, env: dict[str, str] | None = None) -> Iterator[list[str]]:
    """`worldtune twin` on free consecutive loopback ports (retrying if a port was taken); stopped by its pid."""
    import httpx

    for _ in range(5):
        port = free_port()
        cmd = [*WORLDTUNE, "twin", "--port", str(port), "--replicas", str(replicas), *args]
        proc = subprocess.Popen(cmd, env={**os.environ, **(env or {})})
        urls = [f"http://127.0.0.1:{port + i}" for i in range(replicas)]
        try:
            deadline = time.monotonic() + 30
            while proc.poll() is None and time.monotonic() < deadline:
                try:
                    if all(httpx.get(f"{u}/health").status_code == 200 for u in urls):
                        break
                except httpx.TransportError:
                    time.sleep(0.05)
            if proc.poll() is None:
                yield urls
                return
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    pytest.fail("could not start the twin")


def truth(steps: int = 35) -> perf_model.Prediction:
    """What the twin does: the shipped H200 profile, cfg2-u4-hsdp8, the anchor workload with guardrails off."""
    workload = anchor_workload(steps=steps, guardrails=False)
    return perf_model.predict(workload, Plan.parse("cfg2-u4-hsdp8"), resolve_profile("H200"))


def bench(db: Path, *args: str) -> dict[str, object]:
    done = subprocess.run([*WORLDTUNE, "bench", "--db", str(db), "--json", *args], capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_bench_recovers_the_profile_and_throughput(tmp_path: Path) -> None:
    db = tmp_path / "results.db"
    with twin("--time-scale", "100", "--load-time", "0") as urls:
        result = bench(db, "--endpoint", urls[0], "--concurrency", "1,2,4", "--repeats", "3")
    expected = truth()
    # per-step and fixed from the 4- and 8-step probes, within 2% of the twin's profile
    assert result["per_step_s"] == pytest.approx(expected.per_step_s, rel=0.02)
    assert result["fixed_s"] == pytest.approx(expected.fixed_s, rel=0.02)
    assert abs(float(result["prediction_error_rel"])) < 0.01  # type: ignore[arg-type]
    levels = {lv["concurrency"]: lv for lv in result["levels"]}  # type: ignore[attr-defined]
    # throughput is timed on the twin's engine clock (model seconds of its simulated stages, the X-Twin-Done-At
    # header), not by the client's wall clock, which a loaded machine stretches; the result says so
    assert any("twin's engine clock" in note for note in result["notes"])  # type: ignore[attr-defined]
    # one client waits for each clip: 1 / latency; queued clients overlap the tail: 1 / service time
    assert levels[1]["clips_per_hour"] == pytest.approx(3600 / expected.latency_s, rel=0.05)
    assert levels[2]["clips_per_hour"] == pytest.approx(expected.clips_per_hour_per_replica, rel=0.05)
    assert levels[4]["clips_per_hour"] == pytest.approx(expected.clips_per_hour_per_replica, rel=0.05)
    assert result["failed_requests"] == 0 and result["completed_requests"] == 3 * (1 + 2 + 4)
    assert result["latency_p90"] is None and "not claimable (n=21" in result["claims"]["p90"]  # type: ignore[index]
    # everything is in the database: warm-up 2 + probes 2x3 + levels 21
    store = Store(db)
    samples = store.samples(str(result["benchmark_id"]))
    assert len(samples) == 2 + 6 + 21 and all(s.ok for s in samples)
    assert all(s.server_done_at_s is not None for s in samples)
    assert all(s.video_frames == 189 and s.video_width == 1280 for s in samples if s.phase == "full")
    listed = subprocess.run([*WORLDTUNE, "results", "list", "--db", str(db), "--json"], capture_output=True,
                            text=True, check=True)  # fmt: skip
    assert [b["id"] for b in json.loads(listed.stdout)] == [result["benchmark_id"]]
    csv_out = subprocess.run([*WORLDTUNE, "results", "export", str(result["benchmark_id"]), "--format", "csv",
                              "--db", str(db)], capture_output=True, text=True, check=True)  # fmt: skip
    assert len(csv_out.stdout.strip().splitlines()) == 1 + len(samples)


def test_bench_spreads_over_replicas(tmp_path: Path) -> None:
    with twin("--time-scale", "200", "--load-time", "0", replicas=2) as urls:
        result = bench(tmp_path / "r.db", "--endpoint", urls[0], "--endpoint", urls[1], "--concurrency", "4",
                       "--repeats", "3", "--probe-steps", "", "--warmup", "1")  # fmt: skip
    (level,) = result["levels"]  # type: ignore[misc]
    # two replicas with two queued clients each: twice one replica's queued throughput
    assert level["clips_per_hour"] == pytest.approx(2 * truth().clips_per_hour_per_replica, rel=0.07)
    used = {s.endpoint for s in Store(tmp_path / "r.db").samples(str(result["benchmark_id"]))}
    assert used == set(urls)


def test_killed_benchmark_keeps_every_finished_sample(tmp_path: Path) -> None:
    db = tmp_path / "kill.db"
    with twin("--time-scale", "100", "--load-time", "0") as urls:
        proc = subprocess.Popen(
            [*WORLDTUNE, "bench", "--db", str(db), "--endpoint", urls[0], "--repeats", "30", "--probe-steps", "",
             "--warmup", "0"],
            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            count = 0
            while count < 4 and time.monotonic() < deadline:
                time.sleep(0.2)
                if db.exists():
                    with contextlib.suppress(sqlite3.OperationalError), sqlite3.connect(db) as conn:
                        count = conn.execute("SELECT count(*) FROM samples").fetchone()[0]  # once the schema exists
            assert count >= 4
            os.kill(proc.pid, signal.SIGKILL)  # no chance to clean up
            _, stderr = proc.communicate(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
    # every sample the benchmark reported as finished (it reports after writing) is in the database
    reported = [line for line in stderr.splitlines() if "full 35 steps c=1: ok" in line]
    store = Store(db)
    (row,) = store.list_benchmarks()
    samples = store.samples(row["id"])
    # the kill comes once 4 samples are stored; the 4th's line may not be printed yet (it reports after writing)
    assert len(samples) >= 4 and len(samples) >= len(reported) >= 1 and len(samples) < 30
    assert all(s.ok and s.latency_s > 100 for s in samples)
    status = get_benchmark(row["id"], str(db))
    assert status.status == "failed" and "gone" in status.message
    assert status.result is not None and status.result.completed_requests == len(samples)


def test_poisson_arrivals_follow_the_seed(tmp_path: Path) -> None:
    import numpy as np

    with twin("--time-scale", "200", "--load-time", "0") as urls:
        result = bench(tmp_path / "p.db", "--endpoint", urls[0], "--no-full", "--probe-steps", "", "--warmup", "0",
                       "--poisson", "20", "--requests", "8", "--seed", "5")  # fmt: skip
    (level,) = result["levels"]  # type: ignore[misc]
    # 20 clips/h is below the replica's ~33 clips/h: the queue stays short and every request is answered
    assert level["phase"] == "poisson" and level["rate_per_hour"] == 20 and level["completed"] == 8
    samples = sorted(Store(tmp_path / "p.db").samples(str(result["benchmark_id"])), key=lambda s: s.sent_at_model)
    # the schedule is the seeded exponential gaps (mean 180 model s); a sample keeps its place in it
    expected = np.cumsum(np.random.default_rng(5).exponential(3600 / 20, size=8))
    planned = np.array([s.arrival_model_s for s in samples], dtype=float)
    assert np.allclose(planned, expected, atol=1e-6)
    # and they went in that order (when each went, a loaded machine delays x 200 on the model clock: not asserted)
    assert list(planned) == sorted(planned)


def test_async_job_api_measures_the_same_and_leaves_no_jobs(tmp_path: Path) -> None:
    import httpx

    # the twin's sync timeout (200 model s) would cut off a queue of four; jobs are not subject to it
    with twin("--time-scale", "200", "--load-time", "0", env={"VLLM_OMNI_VIDEO_SYNC_TIMEOUT": "200"}) as urls:
        result = bench(tmp_path / "a.db", "--endpoint", urls[0], "--api", "async", "--concurrency", "4",
                       "--repeats", "1", "--warmup", "1")  # fmt: skip
        left = httpx.get(f"{urls[0]}/v1/videos").json()["data"]
    expected = truth()
    assert result["failed_requests"] == 0 and result["completed_requests"] == 4
    assert result["per_step_s"] == pytest.approx(expected.per_step_s, rel=0.02)
    assert result["fixed_s"] == pytest.approx(expected.fixed_s, rel=0.02)
    (level,) = result["levels"]  # type: ignore[misc]
    assert level["latency"]["max"] > 300  # the fourth waited behind three: past the sync timeout, still answered
    assert left == []  # every job was deleted after its clip was downloaded
