"""One benchmark per deployment at a time: a lock in the results database, and the load a benchmark saw.

Two benchmarks against one server queue behind each other and measure each other (two `worldtune bench`
runs against one twin measured 5.46 and 6.15 s per step instead of 3.04). The target of the lock is the
deployment, or, for a bare `--endpoint` benchmark, its sorted endpoint URLs. A second benchmark is refused
naming the one that runs, or (wait=true) waits until it ends. A holder that has finished, or whose process
is gone, no longer holds. Every result says what else measured its target meanwhile (`load`).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from worldtune.tools.store import owners
from worldtune.tools.store.database import Store
from worldtune.tools.words.errors import InvalidInput

STALE_UNSTARTED_S = 60.0  # a lock whose benchmark row never appeared (a crash between the two writes)
POLL_S = 0.2


class BenchmarkBusy(InvalidInput):
    """Another benchmark is measuring the same deployment (or endpoints) right now."""


def lock_target(deployment_id: str | None, endpoints: list[str]) -> str:
    """What a benchmark locks: its deployment, else its endpoint set."""
    if deployment_id:
        return f"deployment:{deployment_id}"
    return "endpoints:" + ",".join(sorted(e.rstrip("/") for e in endpoints))


THREADS: dict[str, threading.Thread] = {}  # benchmarks running in this process, by id (tools/bench/benchmark.py)


def process_gone(row: dict[str, Any], benchmark_id: str) -> bool:
    """A benchmark recorded as running whose process (on this host: its pid and start time, so a recycled pid
    does not count) or thread (in this process) is gone."""
    config = row.get("config") or {}
    pid = config.get("pid")
    if row["status"] != "running" or not isinstance(pid, int) or config.get("host") != owners.host():
        return False
    thread = THREADS.get(benchmark_id)
    alive = owners.process_alive(pid, config.get("pid_start"))
    return not alive or (pid == os.getpid() and (thread is None or not thread.is_alive()))


def _is_stale(store: Store, holder: dict[str, Any]) -> bool:
    row = store.get_benchmark(holder["benchmark_id"])
    if row is None:
        return time.time() - float(holder["acquired_at"]) > STALE_UNSTARTED_S
    return row["status"] != "running" or process_gone(row, holder["benchmark_id"])


def _refusal(store: Store, target: str, holder_id: str, field: str, value: str) -> BenchmarkBusy:
    row = store.get_benchmark(holder_id)
    since = f" since {time.strftime('%H:%M:%S', time.localtime(row['started_at']))}" if row else ""
    return BenchmarkBusy(
        field,
        value,
        f"a deployment no other benchmark is measuring: {holder_id} is running on it{since}",
        "wait for it (get_benchmark), or pass wait=true to start when it ends",
    )


def acquire(
    store: Store,
    target: str,
    benchmark_id: str,
    *,
    wait: bool = False,
    wait_timeout_s: float = 3600.0,
    field: str = "deployment_id",
    value: str = "",
) -> float:
    """Hold `target` for `benchmark_id`; returns the wall seconds waited. BenchmarkBusy if held (and not waiting)."""
    started = time.monotonic()
    deadline = started + wait_timeout_s
    while True:
        holder = store.lock_holder(target)
        stale = holder["benchmark_id"] if holder and _is_stale(store, holder) else None
        blocking = store.take_lock(target, benchmark_id, replacing=stale)
        if blocking is None:
            return time.monotonic() - started
        if not wait or time.monotonic() >= deadline:
            raise _refusal(store, target, blocking, field, value or target)
        time.sleep(POLL_S)


def holder(store: Store, target: str) -> str | None:
    """The benchmark measuring `target` now, if any (a finished or orphaned holder does not count)."""
    found = store.lock_holder(target)
    return None if found is None or _is_stale(store, found) else str(found["benchmark_id"])


def release(store: Store, target: str, benchmark_id: str) -> None:
    store.release_lock(target, benchmark_id)


def load_seen(store: Store, benchmark_id: str, target: str, waited_s: float) -> dict[str, Any]:
    """What else measured `target` while `benchmark_id` ran (benchmarks recorded in this database)."""
    mine = store.get_benchmark(benchmark_id) or {}
    start, end = float(mine.get("started_at") or 0.0), time.time()
    others = []
    for row in store.list_benchmarks(limit=500):
        config = row.get("config") or {}
        theirs = lock_target(row.get("deployment_id"), list(config.get("endpoints") or []))
        if row["id"] == benchmark_id or theirs != target:
            continue
        if float(row["started_at"]) < end and (row.get("finished_at") or end) > start:
            others.append(row["id"])
    return {
        "target": target,
        "waited_s": round(waited_s, 3),
        "concurrent_benchmarks": others,
        "note": "alone on its target (as far as this database knows)"
        if not others
        else f"shared its target with {', '.join(others)}: its latencies include their queueing",
    }
