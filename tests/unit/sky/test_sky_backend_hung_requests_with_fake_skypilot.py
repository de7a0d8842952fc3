"""What worldtune does when SkyPilot's API server hangs, with a FAKE SkyPilot (a mock: a launch request that never
finishes and a log stream that never closes cannot be produced on demand with the real server; the real Slurm
path is tests/integration/test_slurm_skypilot.py)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_sky import FakeSkyBase

from worldtune.sky import backend as sky_backend
from worldtune.sky import bench_remote
from worldtune.sky.backend import RequestTimeout, SkyPilotBackend, launch_timeout_s
from worldtune.sky.bench_job import RESULT_MARKER, SAMPLE_MARKER
from worldtune.tools.bench.benchmark import BenchmarkSpec, Here
from worldtune.tools.store.database import Store
from worldtune.tools.words.deployment import Deployment
from worldtune.tools.words.errors import InvalidInput

RESULT = {"completed_requests": 2, "failed_requests": 0, "latency_mean": 120.0}


SPEC = BenchmarkSpec(endpoints=["http://127.0.0.1:18000"], steps=35)


def sample_line(seq: int) -> str:
    body = {"seq": seq, "phase": "full", "steps": 35, "ok": True, "latency_s": 120.0}
    return f"(bench, pid=1) {SAMPLE_MARKER} {json.dumps(body)}\n"


class HungSky(FakeSkyBase):
    """A request that never resolves (until cancelled), a job that ended while its log stream stays silent."""

    def __init__(self) -> None:
        self.cancelled: list[Any] = []
        self.release = threading.Event()

    def get(self, request: Any) -> Any:
        if request == "hung-request":
            self.release.wait(30)  # released by api_cancel, as the real server answers a cancelled request
            raise RuntimeError("request cancelled")
        return request

    def api_cancel(self, request_id: Any, silent: bool = False) -> None:
        self.cancelled.append(request_id)
        self.release.set()

    def job_status(self, cluster: str, job_ids: list[int]) -> dict[int, Any]:
        class Succeeded:
            value = "SUCCEEDED"

        return {job_ids[0]: Succeeded()}

    def tail_logs(self, cluster: str, job_id: int, follow: bool = True, output_stream: Any = None,
                  **kw: Any) -> Iterator[str] | None:  # fmt: skip
        if not follow:  # the log read in one piece has everything
            output_stream.write(
                sample_line(0) + sample_line(1) + f"(bench, pid=1) {RESULT_MARKER} {json.dumps(RESULT)}\n"
            )
            return None
        return self._silent_stream()

    def _silent_stream(self) -> Iterator[str]:
        yield sample_line(0)
        self.release.wait(30)  # then nothing, and no end, while the test runs


def backend_with(tmp_path: Path, sky: HungSky) -> tuple[SkyPilotBackend, Store]:
    backend = object.__new__(SkyPilotBackend)  # no SkyPilot import, no home: the fake stands in
    store = Store(tmp_path / "r.db")
    backend.store, backend.options, backend.poll_s, backend.autodown = store, None, 0.01, True
    backend.sky = sky
    return backend, store


def test_a_request_past_its_allowance_is_cancelled_and_named(tmp_path: Path) -> None:
    sky = HungSky()
    backend, _ = backend_with(tmp_path, sky)
    with pytest.raises(RequestTimeout, match=r"sky launch wt: SkyPilot request hung-request did not finish within 0 s"):
        backend.result_within("hung-request", 0.05, "sky launch wt")
    assert sky.cancelled == ["hung-request"]
    assert backend.result_within("quick", 5.0, "x") == "quick"  # a request that answers is simply returned


def test_a_finished_job_whose_stream_stays_silent_is_read_in_one_piece(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bench_remote, "STATUS_EVERY_S", 0.0)
    monkeypatch.setattr(bench_remote, "SILENT_STREAM_GRACE_S", 0.05)
    sky = HungSky()
    backend, store = backend_with(tmp_path, sky)
    dep = Deployment(gpu="H200", plan="1gpu", infra="nebius", engine="twin", state="ready",
                     endpoints=["http://127.0.0.1:18000"], cluster="worldtune-wt-x")  # fmt: skip
    store.create_benchmark("bm-x", {"steps": 35})
    try:
        outcome, result = bench_remote.run_attempt(backend, dep, SPEC, "bm-x", 1, lambda m, f: None, None, Here(store))
    finally:
        sky.release.set()
    assert (outcome, result) == ("completed", RESULT)
    assert [s.seq for s in store.samples("bm-x")] == [0, 1]  # the streamed sample is not stored twice


@pytest.mark.parametrize("raw", ["soon", "0", "-5", "inf", "nan"])
def test_a_bad_launch_allowance_is_refused_by_name(raw: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sky_backend.LAUNCH_TIMEOUT_ENV, raw)
    with pytest.raises(InvalidInput, match=f"{sky_backend.LAUNCH_TIMEOUT_ENV}='{raw}' is not valid"):
        launch_timeout_s()


def test_the_launch_allowance_defaults_to_half_an_hour(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(sky_backend.LAUNCH_TIMEOUT_ENV, raising=False)
    assert launch_timeout_s() == 1800.0
    monkeypatch.setenv(sky_backend.LAUNCH_TIMEOUT_ENV, "420")
    assert launch_timeout_s() == 420.0
