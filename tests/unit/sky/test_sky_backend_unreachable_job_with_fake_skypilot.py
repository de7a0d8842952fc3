"""How a benchmark judges a job SkyPilot cannot reach, with a FAKE SkyPilot (a mock: the lag between a cut
cluster and the status refresh that notices it cannot be produced on demand here; the real Slurm path,
scancel included, is tests/integration/test_slurm_skypilot.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_sky import FakeSkyBase

from worldtune.sky import bench_remote
from worldtune.sky.backend import SkyPilotBackend
from worldtune.sky.bench_job import SAMPLE_MARKER
from worldtune.tools.bench.benchmark import BenchmarkSpec, Here
from worldtune.tools.store.database import Store
from worldtune.tools.words.deployment import Deployment

SPEC = BenchmarkSpec(endpoints=["http://127.0.0.1:18000"], steps=35)


class FakeSky(FakeSkyBase):
    """The few SkyPilot client calls a benchmark attempt makes; requests are their own answers."""

    def __init__(self) -> None:
        self.status_calls = 0

    def job_status(self, cluster: str, job_ids: list[int]) -> dict[int, None]:
        return {job_ids[0]: None}  # the job cannot be reached: the cluster was cut

    def tail_logs(self, cluster: str, job_id: int, **kw: Any) -> Iterator[str]:
        sample = {"seq": 0, "phase": "full", "steps": 35, "ok": True, "latency_s": 120.0}
        yield f"(bench, pid=1) {SAMPLE_MARKER} {json.dumps(sample)}\n"  # then the stream breaks


def attempt(tmp_path: Path, refreshes_until_gone: int | None) -> tuple[str, Store, int]:
    """One benchmark attempt whose cluster reads UP for `refreshes_until_gone` status refreshes (None: always)."""
    backend = object.__new__(SkyPilotBackend)  # no SkyPilot import, no home: the fake stands in
    store = Store(tmp_path / "r.db")
    backend.store, backend.options, backend.poll_s, backend.autodown = store, None, 0.01, True
    backend.sky = FakeSky()
    calls = 0

    def status(dep: Deployment) -> Deployment:
        nonlocal calls
        calls += 1
        gone = refreshes_until_gone is not None and calls > refreshes_until_gone
        return dep.model_copy(update={"state": "preempted"}) if gone else dep

    backend.status = status  # type: ignore[method-assign]
    dep = Deployment(gpu="H200", plan="1gpu", infra="nebius", engine="twin", state="ready",
                     endpoints=["http://127.0.0.1:18000"], cluster="worldtune-wt-x")  # fmt: skip
    store.create_benchmark("bm-x", {"steps": 35})
    outcome, _ = bench_remote.run_attempt(backend, dep, SPEC, "bm-x", 1, lambda m, f: None, None, Here(store))
    return outcome, store, calls


def test_a_cut_cluster_seen_late_is_preempted_not_failed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_remote, "STATUS_EVERY_S", 0.0)
    # CI under load: right after scancel the job is unreachable while the cluster still reads UP three times
    outcome, store, calls = attempt(tmp_path, refreshes_until_gone=3)
    assert outcome == "preempted" and calls == 4
    (kept,) = store.samples("bm-x")
    assert kept.interrupted is True and kept.attempt == 1  # the sample measured before the cut is kept


def test_an_unreachable_job_on_an_up_cluster_fails_after_the_grace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bench_remote, "STATUS_EVERY_S", 0.0)
    monkeypatch.setattr(bench_remote, "UNREACHABLE_GRACE_S", 0.2)
    outcome, _, calls = attempt(tmp_path, refreshes_until_gone=None)
    assert outcome.startswith("bench job 7 ended (None) without a result") and calls > 1
