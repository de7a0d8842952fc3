"""The real vLLM-Omni 0.30.0 server, on CPU ranks, serving a tiny random-weight checkpoint of Cosmos3's own pipeline.

The server is the real one (`vllm serve DIR --omni`, its API server, orchestrator, diffusion workers and Cosmos3's
pipeline code) on a test-only CPU platform (tests/real_engine/cpu_platform: plugged in through vLLM-Omni's platform
entry points; its three changes to vLLM-Omni's internals are listed in its patches.py). Through it, for real:
`worldtune bench` (sync and async, probes, concurrency, the key), the twin held to its answers, and parallel plans
over 2 CPU ranks.

What CPU ranks cannot run, and so nothing here runs (the parser test still checks their flags):
- ring attention (`--ring-degree`): warm-up fails, `aten::_scaled_dot_product_efficient_attention` has no CPU kernel;
- FP8 weights (`--diffusion-quantization-config {"method":"fp8"}`): no ScaledMM kernel for the CPU;
- the GPU attention backends (FLASH_ATTN, CUDNN_ATTN, FLASHINFER_ATTN): the CPU platform runs TORCH_SDPA only.
Timings here mean nothing (a 1-layer model on a CPU): the tests check names, codes, bodies, clips and the flow.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from real_engine import KEY, RealServer, tiny_cosmos3

from worldtune.agent.steps import pipeline_work_s, server_wait_s
from worldtune.tools.store.database import Store
from worldtune.tools.twin.video import check_mp4

pytestmark = pytest.mark.integration

CPU_CANNOT_RUN = {
    "r2": "ring: aten::_scaled_dot_product_efficient_attention has no CPU kernel",
    "fp8": "FP8 weights: no ScaledMM kernel on the CPU",
    "fa/cudnn/fi": "GPU attention backends; the CPU platform runs TORCH_SDPA",
}
SIZE, FRAMES = "256x256", 5
STAGES = {"Cosmos3OmniDiffusersPipeline.diffuse", "Cosmos3OmniDiffusersPipeline.vae.decode", "queue_wait_ms",
          "stage_0_gen_ms"}  # fmt: skip


@pytest.fixture(scope="module")
def checkpoint() -> Path:
    return tiny_cosmos3()


@pytest.fixture(scope="module")
def server(checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealServer]:
    with RealServer(checkpoint, tmp_path_factory.mktemp("real") / "server.log") as real:
        yield real


def worldtune(*args: str, key: str | None = KEY, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "WORLDTUNE_API_KEY"}
    if key is not None:
        env["WORLDTUNE_API_KEY"] = key
    return subprocess.run(
        [sys.executable, "-m", "worldtune.cli", *args], capture_output=True, text=True, env=env, timeout=timeout
    )


def bench(server: RealServer, db: Path, *args: str, key: str | None = KEY) -> subprocess.CompletedProcess[str]:
    return worldtune("bench", "--endpoint", server.url, "--size", SIZE, "--frames", str(FRAMES), "--warmup", "1",
                     "--db", str(db), "--json", *args, key=key)  # fmt: skip


def stored_samples(db: Path, benchmark_id: str) -> list[dict[str, Any]]:
    return [dict(s) if not hasattr(s, "model_dump") else s.model_dump() for s in Store(db).samples(benchmark_id)]


def measured(server: RealServer, db: Path, checkpoint: Path, completed: int, *args: str) -> dict[str, Any]:
    """`worldtune bench` with `args`: it succeeded, every request answered, the served model (X-Model: the
    checkpoint's path) and Cosmos3's stage names recorded; its result."""
    done = bench(server, db, *args)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout)
    assert (result["completed_requests"], result["failed_requests"]) == (completed, 0)
    assert result["model"] == "cosmos3-super" and result["served_model"] == str(checkpoint)
    assert set(result["stage_durations_mean"]) == STAGES
    return result


def test_worldtune_bench_measures_the_real_server_sync(server: RealServer, checkpoint: Path, tmp_path: Path) -> None:
    db = tmp_path / "wt.db"
    result = measured(server, db, checkpoint, 6, "--steps", "4", "--repeats", "2", "--concurrency", "1,2",
                      "--probe-steps", "2,3")  # fmt: skip
    assert result["fit"] is not None and set(result["probes"]) == {"2", "3"}
    samples = stored_samples(db, result["benchmark_id"])
    full = [s for s in samples if s["phase"] == "full"]
    assert len(full) == 6 and all(s["ok"] and s["served_model"] == str(checkpoint) for s in full)
    assert all((s["video_frames"], s["video_width"], s["video_height"]) == (FRAMES, 256, 256) for s in full)
    # the queued check reads Cosmos3's real stage names: the pipeline's work and the stage's clock are found in every
    # answer (whether a given sample waited long enough to be flagged is timing on a loaded CPU: the unit test
    # test_tune_graph.py::test_the_queued_check_reads_the_real_servers_stage_names holds the rule to these headers)
    assert all(server_wait_s(s) is not None for s in full)
    assert all(pipeline_work_s(s["stage_durations"]) for s in full)


def test_worldtune_bench_measures_the_real_server_async(server: RealServer, checkpoint: Path, tmp_path: Path) -> None:
    measured(server, tmp_path / "wt.db", checkpoint, 2, "--api", "async", "--steps", "3", "--repeats", "2",
             "--probe-steps", "2")  # fmt: skip
    # the client deletes every job it made: nothing is left on the server
    listed = httpx.get(f"{server.url}/v1/videos", headers={"Authorization": f"Bearer {KEY}"}, timeout=30).json()
    assert listed["data"] == []


@pytest.mark.parametrize("key", [None, "not-the-key"])
def test_bench_against_a_server_that_wants_another_key_is_refused(
    server: RealServer, tmp_path: Path, key: str | None
) -> None:
    """It exited 0 with every request failed http_401 and said nothing (issue 55 item 5)."""
    db = tmp_path / "wt.db"
    done = bench(server, db, "--steps", "2", "--repeats", "1", "--probe-steps", "", key=key)
    assert done.returncode == 2, done.stdout + done.stderr
    answer = json.loads(done.stdout)
    assert answer["valid"] is False and "WORLDTUNE_API_KEY" in answer["reason"] and "401" in answer["reason"]
    assert key is None or key not in answer["reason"]  # the key is named, never its value
    # refused before any request: the benchmark is recorded failed, with no sample
    (recorded,) = Store(db).list_benchmarks()
    assert recorded["status"] == "failed" and Store(db).samples(recorded["id"]) == []


def test_parallel_plans_run_on_two_cpu_ranks(checkpoint: Path, tmp_path: Path) -> None:
    """cfg-parallel 2 and Ulysses 2 (Cosmos3's 2 KV heads divide by 2), each over 2 CPU ranks: the same clip."""
    fields = {"prompt": "a robot arm picks up red cube", "size": SIZE, "num_frames": str(FRAMES),
              "num_inference_steps": "2", "seed": "7"}  # fmt: skip
    form = [(k, (None, v)) for k, v in fields.items()]
    clips = {}
    for name, flags in (("cfg2", ["--cfg-parallel-size", "2"]), ("u2", ["--ulysses-degree", "2"])):
        with RealServer(checkpoint, tmp_path / f"{name}.log", *flags, ranks=2) as real:
            answer = httpx.post(f"{real.url}/v1/videos/sync", files=form, headers={"Authorization": f"Bearer {KEY}"},
                                timeout=300)  # fmt: skip
            assert answer.status_code == 200, answer.text
            assert "Worker 1: Initialized device" in real.log.read_text()  # a second rank ran
            info = check_mp4(answer.content)
            assert (info.frames, info.width, info.height) == (FRAMES, 256, 256)
            clips[name] = answer.content
    assert clips["cfg2"] and clips["u2"]
