"""One benchmark per deployment: a second is refused naming the first, or waits for it; results say their load."""

from __future__ import annotations

import socket
import subprocess
import threading
from pathlib import Path

import pytest

from worldtune.tools.bench import lock as benchmark_lock
from worldtune.tools.bench.benchmark import BenchmarkSpec, start_benchmark
from worldtune.tools.bench.lock import BenchmarkBusy, acquire, load_seen, lock_target
from worldtune.tools.store.database import Store


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "wt.db")


@pytest.fixture
def holder_process() -> subprocess.Popen[bytes]:
    """A live process standing for the benchmark that holds the lock (its pid is in the benchmark's config)."""
    proc = subprocess.Popen(["sleep", "600"])
    yield proc
    proc.kill()
    proc.wait()


def running(store: Store, benchmark_id: str, pid: int, deployment_id: str = "wt-1") -> str:
    config = {"pid": pid, "host": socket.gethostname(), "endpoints": ["http://127.0.0.1:9"]}
    store.create_benchmark(benchmark_id, config, deployment_id=deployment_id)
    target = lock_target(deployment_id, [])
    assert acquire(store, target, benchmark_id) >= 0
    return target


def test_a_second_benchmark_is_refused_naming_the_running_one(
    store: Store, holder_process: subprocess.Popen[bytes]
) -> None:
    target = running(store, "bm-first", holder_process.pid)
    with pytest.raises(BenchmarkBusy) as caught:
        acquire(store, target, "bm-second", field="deployment_id", value="wt-1")
    message = str(caught.value)
    assert message.startswith("deployment_id='wt-1' is not valid: ") and "bm-first is running on it" in message
    assert "wait=true" in message
    assert acquire(store, lock_target("wt-2", []), "bm-second") >= 0  # another deployment is free


def test_a_holder_whose_process_is_gone_no_longer_holds(store: Store, holder_process: subprocess.Popen[bytes]) -> None:
    target = running(store, "bm-first", holder_process.pid)
    holder_process.kill()
    holder_process.wait()
    assert acquire(store, target, "bm-second") >= 0
    assert (store.lock_holder(target) or {})["benchmark_id"] == "bm-second"


def test_wait_starts_when_the_running_one_ends(store: Store, holder_process: subprocess.Popen[bytes]) -> None:
    target = running(store, "bm-first", holder_process.pid)
    got: list[float] = []
    polled = threading.Event()
    real_holder = store.lock_holder

    def watched(t: str) -> dict[str, object] | None:
        polled.set()  # the waiter has looked at least once while bm-first still ran
        return real_holder(t)

    store.lock_holder = watched  # type: ignore[method-assign]
    waiter = threading.Thread(target=lambda: got.append(acquire(store, target, "bm-second", wait=True,
                                                                wait_timeout_s=120)))  # fmt: skip
    waiter.start()
    assert polled.wait(60)
    assert got == []
    store.update_benchmark("bm-first", status="completed")
    benchmark_lock.release(store, target, "bm-first")
    waiter.join()
    assert len(got) == 1 and (real_holder(target) or {})["benchmark_id"] == "bm-second"


def test_start_benchmark_refused_stores_nothing(store: Store, holder_process: subprocess.Popen[bytes]) -> None:
    running(store, "bm-first", holder_process.pid)
    spec = BenchmarkSpec(endpoints=["http://127.0.0.1:9"], deployment_id="wt-1")
    with pytest.raises(BenchmarkBusy, match="bm-first"):
        start_benchmark(spec, str(store.path))
    assert [r["id"] for r in store.list_benchmarks()] == ["bm-first"]


def test_results_record_the_load_they_saw(store: Store) -> None:
    store.create_benchmark("bm-a", {"endpoints": ["http://127.0.0.1:9"]}, deployment_id="wt-1")
    store.create_benchmark("bm-b", {"endpoints": ["http://127.0.0.1:9"]}, deployment_id="wt-1")
    store.create_benchmark("bm-c", {"endpoints": ["http://127.0.0.1:9"]}, deployment_id="wt-2")
    seen = load_seen(store, "bm-a", lock_target("wt-1", []), 0.5)
    assert seen["concurrent_benchmarks"] == ["bm-b"] and "bm-b" in seen["note"] and seen["waited_s"] == 0.5
    store.update_benchmark("bm-b", status="completed")
    assert lock_target(None, ["http://b/", "http://a"]) == "endpoints:http://a,http://b"


def test_a_benchmark_whose_pid_was_recycled_counts_as_gone(holder_process: subprocess.Popen[bytes]) -> None:
    """The config records the process's start time as well as its pid: a live process with that pid but another
    start time is not the benchmark (tools/owners.process_alive), so its lock no longer holds."""
    from worldtune.tools.store import owners

    started = owners.start_time(holder_process.pid)
    assert started is not None
    config = {"pid": holder_process.pid, "host": socket.gethostname()}
    running = {"status": "running", "config": {**config, "pid_start": started}}
    assert not benchmark_lock.process_gone(running, "b-live")
    recycled = {"status": "running", "config": {**config, "pid_start": started + 1}}
    assert benchmark_lock.process_gone(recycled, "b-recycled")
    assert not benchmark_lock.process_gone({**recycled, "status": "completed"}, "b-recycled")
