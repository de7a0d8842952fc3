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
Against a twin, the X-Twin-Time-Scale header gives K and wall times are reported x K (model seconds); a closed
loop's throughput is then timed on the twin's engine clock (X-Twin-Done-At: its simulated stage times, which a
loaded machine cannot stretch), and the result's notes say so. Each request is one tools.sample.Sample.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
import time
from collections.abc import Mapping
from typing import Any

from worldtune.tools.bench import lock as benchmark_lock
from worldtune.tools.bench.runner import Runner, auth_headers, preload
from worldtune.tools.results.compute import compute_result
from worldtune.tools.store import owners
from worldtune.tools.store.database import Store
from worldtune.tools.words.bench_spec import BenchmarkSpec, BenchmarkStatus, new_benchmark_id
from worldtune.tools.words.deployment import Backend, Deployment, Progress
from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.result import BenchmarkResult
from worldtune.tools.words.sample import Sample

__all__ = [
    "BenchmarkResult",
    "BenchmarkSpec",
    "BenchmarkStatus",
    "Here",
    "auth_headers",
    "benchmark_deployment",
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
    attempt: int | None = None,
) -> BenchmarkResult:
    """Run one benchmark to the end (blocking), storing every sample and the result.

    It holds its deployment (or endpoints) for the whole run: another benchmark on them is refused
    (BenchmarkBusy, before anything is stored), or with `wait` waited for; a lock its caller already holds
    for `benchmark_id` is left to the caller. `attempt` (set by a recovering backend, see `Here`) tags
    every sample, and a later attempt numbers its samples after the ones already stored.
    """
    store = store or Store()
    bid = benchmark_id or new_benchmark_id()
    target, field, value = _lock_args(spec)
    waited = 0.0
    acquired = (store.lock_holder(target) or {}).get("benchmark_id") != bid
    if acquired:
        if store.get_benchmark(bid) is not None:
            store.update_benchmark(bid, message="waiting for the benchmark that measures this deployment")
        waited = benchmark_lock.acquire(store, target, bid, wait=wait, field=field, value=value)
    try:
        return _run_locked(spec, store, bid, progress, target, waited, attempt)
    finally:
        if acquired:
            benchmark_lock.release(store, target, bid)


def _run_locked(
    spec: BenchmarkSpec,
    store: Store,
    bid: str,
    progress: Progress | None,
    target: str,
    waited: float,
    attempt: int | None,
) -> BenchmarkResult:
    if store.get_benchmark(bid) is None:
        store.create_benchmark(bid, _config(spec), deployment_id=spec.deployment_id, run_id=spec.run_id)
    first_seq = Here(store).next_seq(bid) if attempt else 0
    if attempt and attempt > 1:
        store.update_benchmark(bid, status="running", message=f"attempt {attempt} after a preemption")
    runner = Runner(spec, store, bid, progress, first_seq=first_seq, attempt=attempt)
    preload()
    started = time.monotonic()
    try:
        asyncio.run(runner.run())
    except BaseException as exc:
        status = "cancelled" if isinstance(exc, KeyboardInterrupt | asyncio.CancelledError) else "failed"
        partial = runner.result(time.monotonic() - started)
        partial.load = benchmark_lock.load_seen(store, bid, target, waited)
        if attempt is not None and status == "failed":  # the backend judges it: relaunched, or failed (below)
            store.update_benchmark(
                bid,
                message=f"attempt {attempt} ended: {type(exc).__name__}: {exc}",
                result=partial.model_dump(mode="json"),
            )
        else:
            store.update_benchmark(
                bid, status=status, error=f"{type(exc).__name__}: {exc}", result=partial.model_dump(mode="json")
            )
        raise
    result = runner.result(time.monotonic() - started)
    result.load = benchmark_lock.load_seen(store, bid, target, waited)
    if attempt is not None:  # a recovering backend's attempt is complete once its node outlived it: not before
        store.update_benchmark(
            bid, message=f"attempt {attempt} measured; is its node still there?", result=result.model_dump(mode="json")
        )
        return result
    store.update_benchmark(bid, status="completed", progress=1.0, message="done", result=result.model_dump(mode="json"))
    return result


class Here:
    """Measuring from this machine, for `Backend.benchmark` (the words' MeasureHere): the request loop above,
    samples in this process's results database."""

    def __init__(self, store: Store, progress: Progress | None = None) -> None:
        self.store, self.progress = store, progress

    def measure(self, spec: BenchmarkSpec, benchmark_id: str, attempt: int) -> BenchmarkResult:
        return run_benchmark(spec, self.store, benchmark_id, self.progress, wait=True, attempt=attempt)

    def cut_short(self, benchmark_id: str, attempt: int) -> str:
        cut = [s for s in self.store.samples(benchmark_id) if s.attempt == attempt]
        for sample in cut:  # kept: what was measured before the node went away still counts as evidence
            sample.interrupted = True
            self.store.add_sample(benchmark_id, sample.seq, sample)
        kept = len(self.store.samples(benchmark_id))
        message = f"{len(cut)} samples of attempt {attempt} marked interrupted, {kept} kept in all"
        self.store.update_benchmark(benchmark_id, status="running", message=message)
        return message

    def answered(self, benchmark_id: str) -> int:
        return sum(1 for s in self.store.samples(benchmark_id) if s.phase == "full" and s.ok)

    def next_seq(self, benchmark_id: str) -> int:
        return max((s.seq for s in self.store.samples(benchmark_id)), default=-1) + 1

    def keep(self, benchmark_id: str, sample: Sample | Mapping[str, Any], message: str) -> None:
        kept = Sample.of(sample)
        self.store.add_sample(benchmark_id, kept.seq, kept)
        self.store.update_benchmark(benchmark_id, message=message)


def benchmark_deployment(
    backend: Backend,
    deployment: Deployment,
    spec: BenchmarkSpec,
    store: Store,
    benchmark_id: str | None = None,
    progress: Progress | None = None,
) -> tuple[Deployment, BenchmarkResult]:
    """Benchmark a deployment through its backend (which recovers from preemption), holding the deployment's
    benchmark lock throughout; a relaunched deployment is saved. Blocks until done."""
    bid = benchmark_id or new_benchmark_id()
    target, field, value = _lock_args(spec)
    held = (store.lock_holder(target) or {}).get("benchmark_id") == bid
    if not held:
        benchmark_lock.acquire(store, target, bid, wait=True, field=field, value=value)
    if store.get_benchmark(bid) is None:
        store.create_benchmark(bid, _config(spec), deployment_id=spec.deployment_id, run_id=spec.run_id)
    try:
        final, result = backend.benchmark(deployment, spec, bid, Here(store, progress), progress)
        result = over_every_attempt(store, bid, spec, result)
        # completed only now, once no preemption cut its last attempt: a reader never sees a benchmark complete
        # (or fail) between a cut attempt and the one on its relaunched node
        if (store.get_benchmark(bid) or {}).get("status") != "completed":
            store.update_benchmark(
                bid, status="completed", progress=1.0, message="done", result=result.model_dump(mode="json")
            )
        else:  # the backend completed it with its last attempt's result: the benchmark's is over every answer
            store.update_benchmark(bid, result=result.model_dump(mode="json"))
    except BaseException as exc:  # an attempt may have completed before its node was found gone
        if (store.get_benchmark(bid) or {}).get("status") != "cancelled":
            store.update_benchmark(bid, status="failed", error=f"{type(exc).__name__}: {exc}")
        raise
    finally:
        benchmark_lock.release(store, target, bid)
    if final.id == deployment.id and final != deployment:
        store.save_deployment(final, if_alive=True)
    return final, result


def over_every_attempt(store: Store, benchmark_id: str, spec: BenchmarkSpec, last: BenchmarkResult) -> BenchmarkResult:
    """The result of a benchmark that went on after a preemption (BenchmarkSpec.remainder): over every request it
    answered, the cut attempts' too, not its last attempt's alone (`last`, returned as is when nothing was cut or
    the run was measured again whole)."""
    if not spec.resumes:  # measured again whole: the last attempt is the run
        return last
    samples = store.samples(benchmark_id)
    if not any(s.interrupted for s in samples):
        return last
    return compute_result(
        [s for s in samples if s.counts()],
        benchmark_id=benchmark_id,
        endpoints=last.endpoints,
        model=last.model,
        steps=last.steps,
        time_scale=last.time_scale,
        wall_duration=last.wall_duration,
    ).model_copy(update={"load": last.load})


def start_benchmark(
    spec: BenchmarkSpec,
    store_path: str | None = None,
    wait: bool = False,
    backend: Backend | None = None,
    deployment: Deployment | None = None,
) -> BenchmarkStatus:
    """Start a benchmark in a background thread of this process and return its id and status at once.

    With `backend` and `deployment` it runs through `backend.benchmark` (preemption recovery; SkyPilot
    measures next to the server), else from here against the spec's endpoints. Refused (BenchmarkBusy,
    nothing stored) when another benchmark measures the same deployment, unless `wait`: then it is
    recorded at once and starts measuring when the other one ends.
    """
    store = Store(store_path)
    bid = new_benchmark_id()
    target, field, value = _lock_args(spec)
    if not wait:
        benchmark_lock.acquire(store, target, bid, field=field, value=value)
    store.create_benchmark(bid, _config(spec), deployment_id=spec.deployment_id, run_id=spec.run_id)

    def work() -> None:
        with contextlib.suppress(Exception):  # the failure is recorded in the Store
            if backend is not None and deployment is not None:
                benchmark_deployment(backend, deployment, spec, store, bid)
            else:
                try:
                    run_benchmark(spec, store=store, benchmark_id=bid, wait=True)
                finally:
                    benchmark_lock.release(store, target, bid)

    thread = threading.Thread(target=work, name=f"benchmark-{bid}", daemon=True)
    benchmark_lock.THREADS[bid] = thread
    try:
        thread.start()
    except BaseException:
        benchmark_lock.release(store, target, bid)
        raise
    return get_benchmark(bid, store_path)


def get_benchmark(benchmark_id: str, store_path: str | None = None, partial: bool = True) -> BenchmarkStatus:
    """Status, progress and (final or partial) result of a benchmark, from the Store. `partial=False`: no partial
    result while it runs (a poller's look: the summary of every sample so far costs more than the look itself); once
    it has ended, its result whatever `partial` says."""
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
    elif samples and (partial or status != "running"):
        result = compute_result(
            samples,
            benchmark_id=benchmark_id,
            endpoints=config.get("endpoints", []),
            model=(config.get("workload") or {}).get("model", ""),
            steps=int(config.get("steps", 0)),
            time_scale=_scale_of(samples),
        )
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


def _scale_of(samples: list[Sample]) -> float:
    for s in samples:
        if s.wall_latency_s and s.latency_s:
            return s.latency_s / s.wall_latency_s
    return 1.0


def wait_benchmark(benchmark_id: str, timeout_s: float, store_path: str | None = None) -> BenchmarkStatus:
    """Poll until the benchmark is no longer running or `timeout_s` wall seconds pass."""
    deadline = time.monotonic() + timeout_s
    while True:
        status = get_benchmark(benchmark_id, store_path)
        if status.status != "running" or time.monotonic() >= deadline:
            return status
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
