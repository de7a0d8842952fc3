"""Issue 16 item 4: every backend's benchmark recovers from preemption the same way
(tools/deployment.benchmark_with_recovery), and the benchmark capability reaches it through `Backend.benchmark`.

The backend here is a FAKE (named so): it stands in for a cloud that reclaims a spot node, which cannot happen on
this machine. The measurement side is real: the results database, the recovery loop and its bookkeeping.
The whole path against real twin processes is tests/integration/test_bench_recovery_local.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from worldtune.tools.bench.benchmark import BenchmarkSpec, Here, benchmark_deployment
from worldtune.tools.store.database import Store
from worldtune.tools.words.deployment import (
    MAX_RECOVERIES,
    Deployment,
    MeasureHere,
    Progress,
    benchmark_from_here,
    benchmark_with_recovery,
)
from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.result import BenchmarkResult


class FakePreemptingBackend:
    """A FAKE cloud backend: its node is reclaimed during the first `preemptions` attempts."""

    name = "fake-cloud"
    status_fresh_s = 0.0

    def __init__(self, preemptions: int) -> None:
        self.preemptions = preemptions
        self.recovered = 0
        self.status_calls = 0
        self.gone = False

    def status(self, deployment: Deployment) -> Deployment:
        self.status_calls += 1
        return deployment.model_copy(update={"state": "preempted" if self.gone else "ready"})

    def recover(self, deployment: Deployment, progress: Progress | None = None) -> Deployment:
        self.recovered += 1
        self.gone = False
        port = 18100 + self.recovered  # a relaunch comes back on another node, at another address
        return deployment.model_copy(update={"state": "ready", "endpoints": [f"http://127.0.0.1:{port}"]})

    def launch(self, deployment: Deployment, progress: Progress | None = None) -> Deployment:
        return deployment

    def replan(self, deployment: Deployment, plan: str, progress: Progress | None = None) -> Deployment:
        return deployment

    def teardown(self, deployment: Deployment) -> Deployment:
        return deployment

    def benchmark(
        self, deployment: Deployment, spec: BenchmarkSpec, benchmark_id: str, here: MeasureHere,
        progress: Progress | None = None,
    ) -> tuple[Deployment, BenchmarkResult]:  # fmt: skip
        return benchmark_from_here(self, deployment, spec, benchmark_id, here, progress)


class CountingHere(Here):
    """The real Here, except that `measure` stores two samples and, while the fake says so, loses the node."""

    def __init__(self, store: Store, backend: FakePreemptingBackend) -> None:
        super().__init__(store)
        self.backend = backend
        self.seen: list[tuple[list[str], int]] = []
        self.repeats: list[int] = []

    def measure(self, spec: BenchmarkSpec, benchmark_id: str, attempt: int) -> BenchmarkResult:
        self.seen.append((spec.endpoints, attempt))
        self.repeats.append(spec.repeats)
        for _ in range(2):
            seq = self.next_seq(benchmark_id)
            sample = {"seq": seq, "phase": "full", "attempt": attempt, "ok": True, "latency_s": 10.0}
            self.keep(benchmark_id, sample, "measuring")
        if attempt <= self.backend.preemptions:
            self.backend.gone = True  # the node goes; the requests after it fail and the run still ends
        return BenchmarkResult(benchmark_id=benchmark_id, endpoints=spec.endpoints, model="cosmos3-super", steps=4)


def ready() -> Deployment:
    return Deployment(id="wt-rec", gpu="H200", plan="1gpu", infra="nebius", engine="twin", capacity="spot",
                      state="ready", endpoints=["http://127.0.0.1:18100"])  # fmt: skip


def spec_of(dep: Deployment) -> BenchmarkSpec:
    return BenchmarkSpec(endpoints=dep.endpoints, steps=4, deployment_id=dep.id)


def test_a_preempted_benchmark_is_relaunched_measured_again_and_keeps_the_cut_samples(tmp_path: Path) -> None:
    store = Store(tmp_path / "r.db")
    backend = FakePreemptingBackend(preemptions=1)
    here = CountingHere(store, backend)
    dep = ready()
    final, result = backend.benchmark(dep, spec_of(dep), "bm-rec", here)
    assert backend.recovered == 1
    # the second attempt measured the relaunched node's address, not the reclaimed one
    assert here.seen == [(["http://127.0.0.1:18100"], 1), (["http://127.0.0.1:18101"], 2)]
    assert final.endpoints == ["http://127.0.0.1:18101"] and final.id == dep.id
    samples = store.samples("bm-rec")
    assert [s.seq for s in samples] == [0, 1, 2, 3]  # the later attempt numbers after the earlier one
    assert [s.interrupted for s in samples] == [True, True, False, False]
    assert result.benchmark_id == "bm-rec"


def test_a_closed_loop_run_goes_on_for_what_its_cut_attempts_did_not_answer(tmp_path: Path) -> None:
    """Issue 39 item 6: nothing lost or double-counted. A closed-loop run at one level (a claim's lane) cut twice
    asks each relaunched node only for the requests not yet answered (6, then 4, then 2); a run with probes, or at
    several levels, is one design and is measured again whole."""
    store = Store(tmp_path / "r.db")
    backend = FakePreemptingBackend(preemptions=2)
    here = CountingHere(store, backend)
    dep = ready()
    lane = BenchmarkSpec(endpoints=dep.endpoints, steps=4, repeats=6, probe_steps=[], deployment_id=dep.id)
    backend.benchmark(dep, lane, "bm-lane", here)
    assert here.repeats == [6, 4, 2] and backend.recovered == 2
    assert sum(s.ok for s in store.samples("bm-lane")) == 6  # each request answered once, over three nodes
    assert lane.remainder(6).repeats == 1 and lane.remainder(0) == lane  # at least a round; nothing answered: all
    pair = lane.model_copy(update={"concurrency": [2], "repeats": 3})
    assert pair.remainder(3).repeats == 2  # 6 requests by 2 clients, 3 answered: 3 left, in rounds of 2
    assert spec_of(dep).remainder(2) == spec_of(dep)  # probes first: again whole
    assert lane.model_copy(update={"concurrency": [1, 2]}).remainder(2).repeats == 6  # two levels: again whole


def test_recovery_stops_after_the_allowed_relaunches(tmp_path: Path) -> None:
    store = Store(tmp_path / "r.db")
    backend = FakePreemptingBackend(preemptions=MAX_RECOVERIES + 1)
    dep = ready()
    with pytest.raises(Exception, match="preempted during attempt 3"):
        backend.benchmark(dep, spec_of(dep), "bm-rec", CountingHere(store, backend))
    assert backend.recovered == MAX_RECOVERIES
    assert len(store.samples("bm-rec")) == 2 * (MAX_RECOVERIES + 1)


def test_a_failure_on_a_live_node_is_not_retried() -> None:
    backend = FakePreemptingBackend(preemptions=0)

    def attempt_on(dep: Deployment, attempt: int) -> BenchmarkResult:
        raise RuntimeError("the server answered 500 to every request")

    with pytest.raises(RuntimeError, match="500"):
        benchmark_with_recovery(backend, ready(), attempt_on, lambda dep, attempt: "-")
    assert backend.recovered == 0 and backend.status_calls == 1  # asked once, found ready: the error stands


def test_a_refusal_asks_the_infra_nothing() -> None:
    backend = FakePreemptingBackend(preemptions=0)

    def attempt_on(dep: Deployment, attempt: int) -> BenchmarkResult:
        raise InvalidInput("steps", 0, "1 to 200")

    with pytest.raises(InvalidInput):
        benchmark_with_recovery(backend, ready(), attempt_on, lambda dep, attempt: "-")
    assert backend.status_calls == 0 and backend.recovered == 0


def test_the_capability_holds_the_lock_saves_the_relaunched_deployment_and_records_the_end(tmp_path: Path) -> None:
    store = Store(tmp_path / "r.db")
    backend = FakePreemptingBackend(preemptions=1)
    dep = ready()
    store.save_deployment(dep)
    held: list[str | None] = []

    class Watching(CountingHere):
        def measure(self, spec: BenchmarkSpec, benchmark_id: str, attempt: int) -> BenchmarkResult:
            held.append((store.lock_holder(f"deployment:{dep.id}") or {}).get("benchmark_id"))
            return super().measure(spec, benchmark_id, attempt)

    def through(d: Deployment, spec: BenchmarkSpec, bid: str, here: MeasureHere, progress: Progress | None = None):
        return benchmark_from_here(backend, d, spec, bid, Watching(store, backend), progress)

    backend.benchmark = through  # type: ignore[method-assign]
    final, _ = benchmark_deployment(backend, dep, spec_of(dep), store, "bm-cap")
    assert held == ["bm-cap", "bm-cap"]  # the deployment stayed locked across the relaunch
    assert store.lock_holder(f"deployment:{dep.id}") is None  # and was released at the end
    saved = store.get_deployment(dep.id)
    assert saved is not None and saved.endpoints == final.endpoints == ["http://127.0.0.1:18101"]
    row = store.get_benchmark("bm-cap")
    assert row is not None and row["deployment_id"] == dep.id
