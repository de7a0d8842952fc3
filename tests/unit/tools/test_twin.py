"""The twin in-process (ASGI, no sockets): headers, FIFO, timings, stage durations, guardrails, jobs, memory, death."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from worldtune.policies import perf_model
from worldtune.tools.plans.estimate import resolve_profile
from worldtune.tools.twin.engine import LoadOutOfMemory
from worldtune.tools.twin.server import TwinConfig, TwinEngine, create_app, replica_count
from worldtune.tools.twin.video import check_mp4, make_mp4
from worldtune.tools.words.plan import Plan
from worldtune.tools.words.profile import Profile
from worldtune.tools.words.workload import anchor_workload

SCALE = 2000.0  # the anchor clip (~120 model s) takes ~60 ms
PIPELINE = "Cosmos3OmniDiffusersPipeline"


@pytest.fixture(autouse=True, scope="module")
def encoded_clips() -> None:
    """Encode the clips once up front, as `serve` does at start-up: at K=2000 an encode would outlast a sync timeout."""
    make_mp4(1280, 720, 189, 24.0)
    make_mp4(1280, 720, 61, 24.0)


def run(
    config: TwinConfig,
    body: Callable[[httpx.AsyncClient], Awaitable[Any]],
    profile: Profile | None = None,
    terminate: Callable[[], None] | None = None,
) -> Any:
    app, _ = create_app(config, profile, terminate)

    async def main() -> Any:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://twin") as client:
            return await body(client)

    return asyncio.run(main())


def form(**changes: Any) -> list[tuple[str, tuple[None, str]]]:
    fields = anchor_workload().form_fields()
    fields.update({k: str(v) for k, v in changes.items()})
    return [(k, (None, v)) for k, v in fields.items()]


def ready(**fields: Any) -> TwinConfig:
    return TwinConfig(time_scale=SCALE, load_time_s=0.0, **fields)


async def finished(client: httpx.AsyncClient, video_id: str) -> httpx.Response:
    """Poll a job until it is done (bounded: the twin at K=2000 finishes any clip here in well under a second)."""
    for _ in range(2000):
        answer = await client.get(f"/v1/videos/{video_id}")
        if answer.json()["status"] in ("completed", "failed"):
            return answer
        await asyncio.sleep(0.005)
    raise AssertionError(f"job {video_id} never finished")


# ---- sync ----------------------------------------------------------------------------------------
def test_sync_returns_the_clip_headers_and_model_times_without_stage_durations() -> None:
    async def body(client: httpx.AsyncClient) -> httpx.Response:
        return await client.post("/v1/videos/sync", files=form(num_inference_steps=35))

    answer = run(ready(), body)
    assert answer.status_code == 200 and answer.headers["content-type"] == "video/mp4"
    info = check_mp4(answer.content)
    assert (info.frames, info.width, info.height, info.fps) == (189, 1280, 720, 24.0)
    predicted = perf_model.predict(anchor_workload(), Plan.parse("cfg2-u4-hsdp8"), resolve_profile("H200"))
    # model seconds, not wall seconds: the time scale only shortens the sleeps
    assert float(answer.headers["X-Inference-Time-S"]) == pytest.approx(predicted.server_s, rel=0.01)  # server clock
    # vLLM-Omni sends stage durations only with --enable-diffusion-pipeline-profiler
    assert answer.headers["X-Stage-Durations"] == "{}"
    assert float(answer.headers["X-Peak-Memory-MB"]) == pytest.approx(predicted.memory_gib_per_gpu * 1024, rel=1e-3)
    assert answer.headers["X-Request-Id"].startswith("video_sync-")
    assert answer.headers["X-Twin-Time-Scale"] == "2000"


def test_the_profiler_flag_sends_pipeline_stages_and_no_guardrail_stage() -> None:
    async def body(client: httpx.AsyncClient) -> httpx.Response:
        return await client.post("/v1/videos/sync", files=form(extra_params='{"guardrails": true}'))

    answer = run(ready(stage_profiler=True), body)
    stages = json.loads(answer.headers["X-Stage-Durations"])
    predicted = perf_model.predict(anchor_workload(), Plan.parse("cfg2-u4-hsdp8"), resolve_profile("H200"))
    # as the real server names Cosmos3's (tests/integration/test_real_engine_server.py): no text encoder stage (the text
    # path is inside `diffuse`), no `.forward`, then the engine's clocks in milliseconds
    assert set(stages) == {f"{PIPELINE}.diffuse", f"{PIPELINE}.vae.decode", "queue_wait_ms", "stage_0_gen_ms"}
    assert stages[f"{PIPELINE}.diffuse"] == pytest.approx(35 * predicted.per_step_s, rel=0.05)
    assert stages[f"{PIPELINE}.diffuse"] > 35 * predicted.per_step_s
    # nothing queued ahead: the stage's clock is the guard (on: this request asks for it) and the pipeline
    guard = perf_model.predict(anchor_workload(guardrails=True), Plan.parse("cfg2-u4-hsdp8"), resolve_profile("H200"))
    work = stages[f"{PIPELINE}.diffuse"] + stages[f"{PIPELINE}.vae.decode"] + guard.guardrail_s
    assert guard.guardrail_s > 1.0
    assert stages["stage_0_gen_ms"] / 1000 == pytest.approx(work, rel=1e-3)


def test_one_request_at_a_time_in_arrival_order() -> None:
    async def body(client: httpx.AsyncClient) -> list[tuple[float, float]]:
        async def one(i: int) -> tuple[float, float]:
            await asyncio.sleep(0.005 * i)  # arrive in order 0, 1, 2
            answer = await client.post("/v1/videos/sync", files=form(seed=i))
            return time.monotonic(), float(answer.headers["X-Inference-Time-S"])

        return list(await asyncio.gather(*(one(i) for i in range(3))))

    # a milder scale here: arrivals 5 ms apart are then ~1 model s apart, not ~10
    done = run(TwinConfig(time_scale=200.0, load_time_s=0.0), body)
    finished_at = [t for t, _ in done]
    assert finished_at == sorted(finished_at)  # FIFO
    served = [s for _, s in done]
    # each one waits for the ones before it: about one service time (latency minus the overlapped tail) more
    assert served[1] - served[0] == pytest.approx(110.1, rel=0.1)
    assert served[2] - served[1] == pytest.approx(110.1, rel=0.1)


def test_sync_timeout_counts_queue_time_504() -> None:
    async def body(client: httpx.AsyncClient) -> list[Any]:
        first = asyncio.create_task(client.post("/v1/videos/sync", files=form()))
        await asyncio.sleep(0.02)
        second = await client.post("/v1/videos/sync", files=form())
        return [(await first).status_code, second.status_code, second.json()["error"]]

    # 180 model s: the first clip (~120 s) fits, the second waits ~110 s in the queue and does not
    codes = run(TwinConfig(time_scale=200.0, load_time_s=0.0, sync_timeout_s=180.0), body)
    assert codes[:2] == [200, 504]
    assert codes[2]["type"] == "Gateway Timeout" and "timed out after 180.0s" in codes[2]["message"]


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_OMNI_VIDEO_SYNC_TIMEOUT", "1800")
    monkeypatch.setenv("VLLM_KEEP_ALIVE_ON_ENGINE_DEATH", "1")
    config = TwinConfig.from_env()
    assert config.sync_timeout_s == 1800.0 and config.keep_alive_on_engine_death


# ---- guardrails ------------------------------------------------------------------------------------
def _guard(config: TwinConfig, prompt: str, per_request: bool | None) -> httpx.Response:
    extra: dict[str, Any] = {"use_resolution_template": False}
    if per_request is not None:
        extra["guardrails"] = per_request

    async def body(client: httpx.AsyncClient) -> httpx.Response:
        return await client.post("/v1/videos/sync", files=form(prompt=prompt, extra_params=json.dumps(extra)))

    return run(config, body)


def test_guardrails_block_per_server_and_per_request() -> None:
    blocked = _guard(ready(), "a bomb in a warehouse", None)
    assert blocked.status_code == 400 and blocked.json()["error"]["type"] == "Bad Request"
    assert "guardrails" in blocked.json()["error"]["message"]
    assert _guard(ready(), "a bomb in a warehouse", False).status_code == 200  # the request turns them off
    assert _guard(ready(guardrails=False), "a bomb in a warehouse", True).status_code == 200  # the server's off wins
    on, off = _guard(ready(), "a robot in a warehouse", True), _guard(ready(), "a robot in a warehouse", False)
    assert float(on.headers["X-Inference-Time-S"]) > float(off.headers["X-Inference-Time-S"])  # the guard's time


# ---- async jobs ------------------------------------------------------------------------------------
def test_async_job_lifecycle() -> None:
    async def body(client: httpx.AsyncClient) -> dict[str, Any]:
        out: dict[str, Any] = {}
        created = (await client.post("/v1/videos", files=form(num_frames=61))).json()
        out["created"] = created
        out["early_content"] = (await client.get(f"/v1/videos/{created['id']}/content")).status_code
        out["done"] = (await finished(client, created["id"])).json()
        out["content"] = await client.get(f"/v1/videos/{created['id']}/content")
        out["listed"] = (await client.get("/v1/videos")).json()
        out["deleted"] = (await client.delete(f"/v1/videos/{created['id']}")).json()
        out["after"] = await client.get(f"/v1/videos/{created['id']}")
        bad = (await client.post("/v1/videos", files=form(prompt="gore", extra_params='{"guardrails": true}'))).json()
        out["failed"] = await finished(client, bad["id"])
        out["failed_content"] = (await client.get(f"/v1/videos/{bad['id']}/content")).json()
        return out

    out = run(ready(), body)
    assert out["created"]["status"] == "queued" and out["created"]["id"].startswith("video_gen_")
    assert out["created"]["object"] == "video" and out["created"]["progress"] == 0
    assert out["early_content"] == 404
    done = out["done"]
    assert done["status"] == "completed" and done["progress"] == 100 and done["inference_time_s"] > 0
    assert done["num_frames"] == 61 and done["peak_memory_mb"] > 0 and done["stage_durations"] == {}
    assert check_mp4(out["content"].content).frames == 61
    assert out["listed"]["object"] == "list" and out["listed"]["first_id"] == done["id"]
    assert out["deleted"] == {"id": done["id"], "deleted": True, "object": "video.deleted"}
    assert out["after"].status_code == 404 and out["after"].json()["error"]["type"] == "Not Found"
    failed = out["failed"]
    assert failed.status_code == 400 and failed.json()["error"]["code"] == 400
    assert failed.json()["inference_time_s"] is not None  # set on failed jobs too
    assert out["failed_content"]["error"]["code"] == 422


def test_replicas_from_the_flag_or_the_plan_prefix() -> None:
    assert replica_count(TwinConfig(plan="2xcfg2-u2-hsdp4"), None) == 2
    assert replica_count(TwinConfig(plan="cfg2-u4-hsdp8"), None) == 1
    assert replica_count(TwinConfig(plan="cfg2-u4-hsdp8"), 3) == 3
    with pytest.raises(ValueError, match="replicas"):
        replica_count(TwinConfig(), 0)


# ---- memory: the profile's terms are the truth ----------------------------------------------------
def test_weights_that_do_not_fit_fail_the_load_with_cudas_text() -> None:
    # Super's ~117 GiB of BF16 weights fit one H200 (140 GiB) only at the edge: a truth with 30 GiB of runtime
    # instead of the shipped profile's few does not load on one GPU, and still loads sharded over eight (HSDP8)
    truth = resolve_profile("H200").with_changes(runtime_gib=30.0)
    engine = TwinEngine(TwinConfig(plan="1gpu", time_scale=SCALE, load_time_s=10.0), truth)
    with pytest.raises(LoadOutOfMemory, match=r"CUDA out of memory\. Tried to allocate .* GiB"):
        asyncio.run(engine.load())
    asyncio.run(TwinEngine(TwinConfig(plan="1gpu", time_scale=SCALE, load_time_s=10.0)).load())
    asyncio.run(TwinEngine(ready(), truth).load())


def _oom(profile: Profile) -> dict[str, Any]:
    async def body(client: httpx.AsyncClient) -> dict[str, Any]:
        sync = await client.post("/v1/videos/sync", files=form())
        job = (await client.post("/v1/videos", files=form())).json()
        failed = await finished(client, job["id"])
        health = await client.get("/health")
        return {"sync": sync, "job": failed, "health": health.status_code}

    return run(ready(), body, profile)


def test_activations_that_do_not_fit_fail_the_request_and_the_server_stays_up() -> None:
    base = resolve_profile("H200")
    out = _oom(base.with_changes(activation_gib_per_ktoken=12.0))  # ~130 GiB of activations per GPU
    assert out["sync"].status_code == 500
    error = out["sync"].json()["error"]
    assert error["type"] == "Internal Server Error"
    assert error["message"].startswith("Video generation failed: CUDA out of memory. Tried to allocate")
    job = out["job"]
    assert job.status_code == 500 and job.json()["status"] == "failed" and job.json()["error"]["code"] == 500
    assert "CUDA out of memory" in job.json()["error"]["message"]
    assert out["health"] == 200  # a request's OOM is request-scoped in 0.30: the engine serves on


def test_a_vae_workspace_that_does_not_fit_fails_after_the_denoising() -> None:
    base = resolve_profile("H200")
    out = _oom(base.with_changes(vae_decode_gib=200.0))
    job = out["job"].json()
    assert job["status"] == "failed" and "CUDA out of memory" in job["error"]["message"]
    predicted = perf_model.predict(anchor_workload(), Plan.parse("cfg2-u4-hsdp8"), base)
    assert job["inference_time_s"] >= 0.9 * 35 * predicted.per_step_s  # it failed at the decode, not before


# ---- a dead engine ---------------------------------------------------------------------------------------
def test_a_dead_engine_answers_503_on_health_and_500_on_work_then_stops_the_server() -> None:
    stopped: list[bool] = []
    app, engine = create_app(ready(), terminate=lambda: stopped.append(True))

    async def main() -> tuple[httpx.Response, httpx.Response, httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://twin") as client:
            before = await client.get("/health")
            engine.kill()
            return before, await client.get("/health"), await client.post("/v1/videos/sync", files=form())

    before, after, work = asyncio.run(main())
    assert before.json() == {"status": "healthy"}
    assert after.status_code == 503 and after.json() == {"status": "unhealthy"}
    assert work.status_code == 500 and work.json()["error"]["type"] == "InternalServerError"
    assert "EngineCore encountered an issue" in work.json()["error"]["message"]
    assert stopped == [True]  # terminate_if_errored
