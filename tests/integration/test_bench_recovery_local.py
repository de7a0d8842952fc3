"""Issue 16 item 4 against real twin processes: a benchmark whose node is reclaimed mid-run is relaunched and run
again through `Backend.benchmark`, the path the MCP tools and the agent take (tools/benchmark.benchmark_deployment).

SpotLikeLocal is a STAND-IN for a spot cloud (no cloud can reclaim a node here): the local backend, except that a
replica the test kills reads as preempted (a reclaimed node) rather than failed. Everything else is real: the twin
processes, HTTP, the clip checks, the results database, the lock, the relaunch."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from worldtune.tools.backends.local import LocalBackend, _alive
from worldtune.tools.bench.benchmark import BenchmarkSpec, benchmark_deployment
from worldtune.tools.deployments import deploy as deploying
from worldtune.tools.store.database import Store
from worldtune.tools.words.deploy_request import DeployRequest
from worldtune.tools.words.deployment import Deployment, Progress

pytestmark = pytest.mark.integration


class SpotLikeLocal(LocalBackend):
    """LocalBackend whose killed replica reads as a reclaimed spot node (STAND-IN for a cloud's preemption)."""

    reclaimed = False

    def status(self, deployment: Deployment) -> Deployment:
        current = super().status(deployment)
        if current.state == "failed" and self.reclaimed:
            return current.model_copy(update={"state": "preempted"})
        return current

    def recover(self, deployment: Deployment, progress: Progress | None = None) -> Deployment:
        self.reclaimed = False
        return super().recover(deployment, progress)


def pids_of(dep: Deployment) -> list[int]:
    return list(dep.handle.pids)


def test_a_benchmark_cut_by_a_reclaimed_node_is_relaunched_and_completes(tmp_path: Path) -> None:
    store = Store(tmp_path / "w.db")
    backend = SpotLikeLocal(store)
    dep = deploying.deploy(DeployRequest(gpu="H200", plan="1gpu", time_scale=1000.0), store=store, backend=backend)
    first_pids = pids_of(dep)
    spec = BenchmarkSpec(endpoints=dep.endpoints, steps=4, repeats=6, concurrency=[1], probe_steps=[], warmup=0,
                         deployment_id=dep.id, plan=str(dep.plan))  # fmt: skip
    stored = 0

    def progress(message: str, fraction: float | None) -> None:
        nonlocal stored
        if fraction is None or backend.reclaimed or stored < 0:
            return
        stored += 1
        if stored == 2:  # the second sample is stored: the node goes away under the benchmark
            backend.reclaimed = True
            for pid in first_pids:
                os.kill(pid, signal.SIGKILL)
            stored = -1  # once

    final = dep
    try:
        final, result = benchmark_deployment(backend, dep, spec, store, "bm-reclaimed", progress)
        samples = store.samples("bm-reclaimed")
        first = [s for s in samples if s.attempt == 1]
        second = [s for s in samples if s.attempt == 2]
        # what the first attempt measured before the cut is kept and marked; the second asked only for the rest
        assert len([s for s in first if s.ok]) == 2 and all(s.interrupted for s in first)
        assert len(second) == 4 and all(s.ok for s in second) and not any(s.interrupted for s in second)
        assert min(s.seq for s in second) > max(s.seq for s in first)
        # the result is over every request answered, the cut attempt's two and the relaunched node's four; the one cut
        # in flight was asked again, not failed
        assert result.benchmark_id == "bm-reclaimed" and result.completed_requests == 6 and result.failed_requests == 0
        assert result.endpoints == final.endpoints
        # the relaunch is the same deployment on new processes, saved as ready
        assert final.id == dep.id and final.state == "ready" and set(pids_of(final)).isdisjoint(first_pids)
        saved = store.get_deployment(dep.id)
        assert saved is not None and saved.state == "ready" and saved.endpoints == final.endpoints
        row = store.get_benchmark("bm-reclaimed")
        assert row is not None and row["status"] == "completed" and row["result"]["completed_requests"] == 6
        assert store.lock_holder(f"deployment:{dep.id}") is None
    finally:
        backend.teardown(store.get_deployment(dep.id) or final)
    assert not any(_alive(pid) for pid in pids_of(final))
    assert store.ledger(open_only=True) == []


def test_a_live_server_that_fails_is_not_relaunched(tmp_path: Path) -> None:
    store = Store(tmp_path / "w.db")
    backend = SpotLikeLocal(store)  # never reclaimed: a killed replica reads failed, as on a node still held
    dep = deploying.deploy(DeployRequest(gpu="H200", plan="1gpu", time_scale=1000.0), store=store, backend=backend)
    spec = BenchmarkSpec(endpoints=dep.endpoints, steps=4, repeats=4, concurrency=[1], probe_steps=[], warmup=0,
                         deployment_id=dep.id, plan=str(dep.plan))  # fmt: skip
    killed: list[int] = []

    def progress(message: str, fraction: float | None) -> None:
        if fraction is not None and not killed:  # the first sample is stored: the server dies
            killed.extend(pids_of(dep))
            for pid in killed:
                os.kill(pid, signal.SIGKILL)

    try:
        _, result = benchmark_deployment(backend, dep, spec, store, "bm-dead", progress)
    finally:
        backend.teardown(store.get_deployment(dep.id) or dep)
    # the run ends with its failed requests as its result; nothing is relaunched or run again. The kill comes when
    # the first sample is stored, which the runner does beside the next request: on a loaded machine that request
    # (0.05 s at this time scale) can be answered first, so what completed is counted, not assumed to be one.
    ok = [s for s in store.samples("bm-dead") if s.ok]
    assert result.completed_requests == len(ok) and 1 <= len(ok) <= 2
    assert result.failed_requests == 4 - len(ok)
    assert {s.attempt for s in store.samples("bm-dead")} == {1}
    assert not any(s.interrupted for s in store.samples("bm-dead"))
    current = store.get_deployment(dep.id)
    assert current is not None and current.state == "failed"
