"""worldtune's clients against the stricter twin: the benchmark, the local backend, the SkyPilot run script, the agent.

The twin refuses connections while it loads, sends no stage durations without the profiler flag, rounds frames up
to 4k + 1, and runs out of memory where its profile (the rehearsal's truth) says the GPU is too small.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_twin_http import twin

from worldtune.agent.steps import every_request_failed
from worldtune.sky import render
from worldtune.tools.backends.local import DeploymentFailed, LocalBackend, free_port
from worldtune.tools.bench.benchmark import BenchmarkSpec, BenchmarkStatus, run_benchmark
from worldtune.tools.deployments.preview import render_options
from worldtune.tools.mcp.results import ResultRecord
from worldtune.tools.plans.estimate import resolve_profile
from worldtune.tools.store.database import Store
from worldtune.tools.words.deployment import Deployment
from worldtune.tools.words.workload import anchor_workload

pytestmark = pytest.mark.integration


def truth(tmp_path: Path, **changes: float) -> str:
    """A rehearsal profile whose memory terms differ from the shipped H200 profile the agent believes."""
    path = tmp_path / "truth.yaml"
    resolve_profile("H200").with_changes(**changes).dump(path)
    return str(path)


def test_the_benchmark_waits_through_refusals_and_takes_rounded_frames_without_stage_durations(tmp_path: Path) -> None:
    # started at once, while the twin still loads (300 model s at K=100): every /health attempt is refused at first
    with twin("--time-scale", "100", "--load-time", "300", wait=False) as (url, _):
        spec = BenchmarkSpec(endpoints=[url], workload=anchor_workload(num_frames=120), steps=8, repeats=1,
                             probe_steps=[4, 8], warmup=0, full=False, ready_timeout_s=120)  # fmt: skip
        result = run_benchmark(spec, store=Store(tmp_path / "w.db"))
    samples = Store(tmp_path / "w.db").samples(result.benchmark_id)
    assert len(samples) == 2 and all(s.ok for s in samples), samples
    assert {s.video_frames for s in samples} == {121}  # 120 asked, the pipeline's 4k + 1 served
    assert all(s.stage_durations == {} for s in samples)
    assert result.fit is not None and result.fit.per_step_s > 0  # the fit needs no stage durations


def test_a_request_peak_that_does_not_fit_fails_every_request_with_the_reason(tmp_path: Path) -> None:
    profile = truth(tmp_path, activation_gib_per_ktoken=12.0)
    with twin("--time-scale", "200", "--load-time", "0", "--profile", profile) as (url, _):
        spec = BenchmarkSpec(endpoints=[url], steps=4, repeats=1, probe_steps=[4], warmup=0, full=False)
        result = run_benchmark(spec, store=Store(tmp_path / "w.db"))
    samples = Store(tmp_path / "w.db").samples(result.benchmark_id)
    assert samples and not any(s.ok for s in samples)
    assert {s.error_kind for s in samples} == {"out_of_memory"}
    stored = BenchmarkStatus(id=result.benchmark_id, status="completed", started_at=0.0)
    record = ResultRecord(benchmark=stored, config={}, samples=[s.record() for s in samples], sample_count=len(samples))
    reason = every_request_failed("probe", record)
    assert reason is not None and "out_of_memory" in reason and "CUDA out of memory" in reason


def test_the_local_backend_reports_a_load_that_runs_out_of_memory(tmp_path: Path) -> None:
    store = Store(tmp_path / "w.db")
    dep = Deployment(gpu="H200", plan="1gpu", time_scale=100.0, twin_profile=truth(tmp_path, runtime_gib=30.0))
    store.save_deployment(dep)
    with pytest.raises(DeploymentFailed, match="CUDA out of memory") as failed:
        LocalBackend(store, log_dir=tmp_path / "logs").launch(dep)
    assert "Initialization failed" in str(failed.value)
    stored = store.get_deployment(dep.id)
    assert stored is not None and stored.state == "failed" and "CUDA out of memory" in stored.detail
    assert store.ledger(open_only=True) == []


def _run_script(
    tmp_path: Path, dep: Deployment, api_key: str | None = "key-as-skypilot-passes-it"
) -> subprocess.Popen[bytes]:
    options = render.RenderOptions(worldtune=f"{sys.executable} -m worldtune.cli", base_port=free_port(),
                                   host="127.0.0.1", open_ports=False)  # fmt: skip
    script = tmp_path / "run.sh"
    script.write_text(render.render_task(dep, render_options(dep, options))["run"])
    env = {**os.environ, "SKYPILOT_TASK_ID": f"t-{dep.id}", "HOME": str(tmp_path)}
    env.pop("WORLDTUNE_API_KEY", None)
    if api_key is not None:  # the secret SkyPilot passes to the task (sky/backend.with_secrets)
        env["WORLDTUNE_API_KEY"] = api_key
    # unbuffered bytes: select() on the pipe then sees every line the script has written
    return subprocess.Popen(["bash", str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=0,
                            env=env, start_new_session=True)  # fmt: skip


def _lines_until(proc: subprocess.Popen[bytes], markers: tuple[str, ...], within_s: float) -> list[str]:
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 1.0)
        if ready:
            line = proc.stdout.readline().decode(errors="replace")
            if not line:
                break
            lines.append(line)
            if any(m in line for m in markers):
                return lines
    raise AssertionError(f"no {markers} within {within_s} s: {''.join(lines)}")


def test_the_skypilot_run_script_waits_through_refusals_and_reports_a_load_oom(tmp_path: Path) -> None:
    ok = Deployment(gpu="H200", plan="cfg2-u4-hsdp8", infra="slurm/local", time_scale=100.0)
    proc = _run_script(tmp_path, ok)
    try:
        lines = _lines_until(proc, (render.ALL_READY_MARKER, render.FAILED_MARKER), 120)
        assert render.ALL_READY_MARKER in lines[-1] and any(render.READY_MARKER in x for x in lines)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the session this test started (the script and its twin)
        proc.wait(timeout=30)
    unkeyed = _run_script(tmp_path, ok, api_key=None)  # launched without the secret: said, nothing started
    lines = _lines_until(unkeyed, (render.FAILED_MARKER,), 60)
    assert "API key is not set" in lines[-1] and unkeyed.wait(timeout=30) == 1
    oom = Deployment(gpu="H200", plan="1gpu", infra="slurm/local", time_scale=100.0,
                     twin_profile=truth(tmp_path, runtime_gib=30.0))  # fmt: skip
    proc = _run_script(tmp_path, oom)
    try:
        lines = _lines_until(proc, (render.FAILED_MARKER,), 120)
        assert "exited before ready" in lines[-1]
        assert proc.wait(timeout=30) == 1
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
