"""Benchmark: the controlled run against vLLM-Omni (or twin) endpoints, and its job API.

Public API (plain, typed, pydantic in/out; the MCP server and the agent call these):

    BenchmarkSpec(endpoints=[url, ...], workload=anchor_workload(), steps=35, repeats=3, concurrency=[1],
                  poisson_rate_per_hour=None, poisson_requests=20, seed=17, probe_steps=[4, 8], warmup=2,
                  full=True, check_video=True, api="sync", expected_latency_s=None, deployment_id=None,
                  run_id=None, label="")
    run_benchmark(spec, store=None, benchmark_id=None, progress=None, wait=False) -> BenchmarkResult  # blocks
    start_benchmark(spec, store_path=None, wait=False) -> BenchmarkStatus  # returns at once, runs in a thread
    get_benchmark(benchmark_id, store_path=None) -> BenchmarkStatus  # any process can ask (reads the Store)
    wait_benchmark(benchmark_id, timeout_s, store_path=None) -> BenchmarkStatus

One run: wait for /health, warm-up requests (not counted), short-step probes (two step counts x repeats)
whose affine fit `fixed + steps x per_step` predicts the full-step latency, closed-loop levels (c clients
spread over every endpoint, each sending `repeats` full-step requests), then optional open-loop Poisson
arrivals from a seeded generator. Requests go to POST /v1/videos/sync as multipart forms (or, with
api="async", to POST /v1/videos, polled, downloaded and deleted: no server sync timeout); each answer's
MP4 is checked (frames, size, fps) and every sample is written to the Store as it arrives, so a killed
benchmark keeps everything it finished. Client timeouts are derived from the expected queue ahead of
the request (expected latency x (requests ahead + 1) x factor + margin), never a fixed number.
Against a twin, the X-Twin-Time-Scale header gives K and wall times are reported x K (model seconds).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
import time
from typing import Any

from worldtune.tools import benchmark_lock, owners
from worldtune.tools.bench_runner import Runner, auth_headers, preload
from worldtune.tools.bench_spec import BenchmarkSpec, BenchmarkStatus, new_benchmark_id
from worldtune.tools.deployment import Progress
from worldtune.tools.errors import InvalidInput
from worldtune.tools.result import BenchmarkResult
from worldtune.tools.result_compute import compute_result
from worldtune.tools.store import Store

__all__ = [
    "BenchmarkSpec",
    "BenchmarkStatus",
    "auth_headers",
    "get_benchmark",
    "new_benchmark_id",
    "run_benchmark",
    "start_benchmark",
    "wait_benchmark",
]


# ---- running and the job API -----------------------------------------------------------------
def _config(spec: BenchmarkSpec) -> dict[str, Any]:
    # pid + start time: the process that runs it, so a reader can tell it is gone (a pid alone gets reused)
    pid_start = owners.start_time(os.getpid())
    return {**spec.model_dump(mode="json"), "pid": os.getpid(), "pid_start": pid_start, "host": socket.gethostname()}


def _lock_args(spec: BenchmarkSpec) -> tuple[str, str, str]:
    """(lock target, the field a refusal names, its value)."""
    target = benchmark_lock.lock_target(spec.deployment_id, spec.endpoints)
    if spec.deployment_id:
        return target, "deployment_id", spec.deployment_id
    return target, "endpoint", ", ".join(spec.endpoints)


def run_benchmark(
    spec: BenchmarkSpec,
    store: Store | None = None,
    benchmark_id: str | None = None,
    progress: Progress | None = None,
    wait: bool = False,
) -> BenchmarkResult:
    """Run one benchmark to the end (blocking), storing every sample and the result.

    It holds its deployment (or endpoints) for the whole run: another benchmark on them is refused
    (BenchmarkBusy, before anything is stored), or with `wait` waited for.
    """
    store = store or Store()
    bid = benchmark_id or new_benchmark_id()
    target, field, value = _lock_args(spec)
    waited = 0.0
    if (store.lock_holder(target) or {}).get("benchmark_id") != bid:
        if store.get_benchmark(bid) is not None:
            store.update_benchmark(bid, message="waiting for the benchmark that measures this deployment")
        waited = benchmark_lock.acquire(store, target, bid, wait=wait, field=field, value=value)
    try:
        return _run_locked(spec, store, bid, progress, target, waited)
    finally:
        benchmark_lock.release(store, target, bid)


def _run_locked(
    spec: BenchmarkSpec, store: Store, bid: str, progress: Progress | None, target: str, waited: float
) -> BenchmarkResult:
    if store.get_benchmark(bid) is None:
        store.create_benchmark(bid, _config(spec), deployment_id=spec.deployment_id, run_id=spec.run_id)
    runner = Runner(spec, store, bid, progress)
    preload()
    started = time.monotonic()
    try:
        asyncio.run(runner.run())
    except BaseException as exc:
        status = "cancelled" if isinstance(exc, KeyboardInterrupt | asyncio.CancelledError) else "failed"
        partial = runner.result(time.monotonic() - started)
        partial.load = benchmark_lock.load_seen(store, bid, target, waited)
        store.update_benchmark(bid, status=status, error=f"{type(exc).__name__}: {exc}",
                               result=partial.model_dump(mode="json"))  # fmt: skip
        raise
    result = runner.result(time.monotonic() - started)
    result.load = benchmark_lock.load_seen(store, bid, target, waited)
    store.update_benchmark(bid, status="completed", progress=1.0, message="done", result=result.model_dump(mode="json"))
    return result


def start_benchmark(spec: BenchmarkSpec, store_path: str | None = None, wait: bool = False) -> BenchmarkStatus:
    """Start a benchmark in a background thread of this process and return its id and status at once.

    Refused (BenchmarkBusy, nothing stored) when another benchmark measures the same deployment, unless
    `wait`: then it is recorded at once and starts measuring when the other one ends.
    """
    store = Store(store_path)
    bid = new_benchmark_id()
    target, field, value = _lock_args(spec)
    if not wait:
        benchmark_lock.acquire(store, target, bid, field=field, value=value)
    store.create_benchmark(bid, _config(spec), deployment_id=spec.deployment_id, run_id=spec.run_id)

    def work() -> None:
        with contextlib.suppress(Exception):  # the failure is recorded in the Store by run_benchmark
            run_benchmark(spec, store=store, benchmark_id=bid, wait=True)

    thread = threading.Thread(target=work, name=f"benchmark-{bid}", daemon=True)
    benchmark_lock.THREADS[bid] = thread
    try:
        thread.start()
    except BaseException:
        benchmark_lock.release(store, target, bid)
        raise
    return get_benchmark(bid, store_path)


def get_benchmark(benchmark_id: str, store_path: str | None = None) -> BenchmarkStatus:
    """Status, progress and (final or partial) result of a benchmark, from the Store."""
    store = Store(store_path)
    row = store.get_benchmark(benchmark_id)
    if row is None:
        raise InvalidInput("benchmark_id", benchmark_id, f"an id in {store.path} (see `worldtune results list`)")
    config = row.get("config") or {}
    pid = config.get("pid")
    gone = benchmark_lock.process_gone(row, benchmark_id)
    if gone:  # it may have finished between the two looks; a row read after its end is final
        row = store.get_benchmark(benchmark_id) or row
    samples = store.samples(benchmark_id)
    status, error, message = row["status"], row.get("error"), row.get("message") or ""
    if gone and status == "running":
        status, message = "failed", f"the benchmark process ({pid}) is gone; result from {len(samples)} samples"
    result = None
    if row.get("result"):
        result = BenchmarkResult.model_validate(row["result"])
    elif samples:
        result = compute_result(
            samples, benchmark_id=benchmark_id, endpoints=config.get("endpoints", []),
            model=(config.get("workload") or {}).get("model", ""), steps=int(config.get("steps", 0)),
            time_scale=_scale_of(samples),
        )  # fmt: skip
    return BenchmarkStatus(
        id=benchmark_id,
        status=status,
        progress=float(row.get("progress") or 0.0),
        message=message,
        started_at=float(row["started_at"]),
        finished_at=row.get("finished_at"),
        samples_done=len(samples),
        deployment_id=row.get("deployment_id"),
        run_id=row.get("run_id"),
        result=result,
        error=error,
    )


def _scale_of(samples: list[dict[str, Any]]) -> float:
    for s in samples:
        wall, model = s.get("wall_latency_s"), s.get("latency_s")
        if wall and model:
            return float(model) / float(wall)
    return 1.0


def wait_benchmark(benchmark_id: str, timeout_s: float, store_path: str | None = None) -> BenchmarkStatus:
    """Poll until the benchmark is no longer running or `timeout_s` wall seconds pass."""
    deadline = time.monotonic() + timeout_s
    while True:
        status = get_benchmark(benchmark_id, store_path)
        if status.status != "running" or time.monotonic() >= deadline:
            return status
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


__all__ = [
    "BenchmarkResult",
    "BenchmarkSpec",
    "BenchmarkStatus",
    "get_benchmark",
    "run_benchmark",
    "start_benchmark",
    "wait_benchmark",
]
