"""The twin engine in-process (ASGI, no sockets): vLLM-Omni's fields, codes, headers, FIFO, timings, guardrails."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from worldtune.policies import perf_model
from worldtune.tools.estimate import resolve_profile
from worldtune.tools.plan import Plan
from worldtune.tools.twin import TwinConfig, TwinEngine, TwinError, create_app, parse_form
from worldtune.tools.video import check_mp4, make_mp4
from worldtune.tools.workload import anchor_workload

SCALE = 2000.0  # the anchor clip (~120 model s) takes ~60 ms


@pytest.fixture(autouse=True, scope="module")
def encoded_clips() -> None:
    """Encode the clips once up front, as `serve` does at start-up: at K=2000 an encode would outlast a sync timeout."""
    make_mp4(1280, 720, 189, 24)
    make_mp4(1280, 720, 61, 24)


def run(config: TwinConfig, body: Callable[[httpx.AsyncClient], Awaitable[Any]]) -> Any:
    app, _ = create_app(config)

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


# ---- the form ----------------------------------------------------------------------------------------
def test_max_sequence_length_only_from_extra_params() -> None:
    engine = TwinEngine(ready())
    fields = anchor_workload().form_fields()
    wl, _ = parse_form({**fields, "max_sequence_length": "512"}, engine)
    assert wl.max_sequence_length == 4096  # the top-level field is ignored, as vLLM-Omni does
    extra = json.loads(fields["extra_params"]) | {"max_sequence_length": 512}
    wl, _ = parse_form({**fields, "extra_params": json.dumps(extra)}, engine)
    assert wl.max_sequence_length == 512


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"num_inference_steps": "201"}, "num_inference_steps='201'"),
        ({"num_inference_steps": "0"}, "num_inference_steps='0'"),
        ({"guidance_scale": "21"}, "guidance_scale='21'"),
        ({"num_frames": "301"}, "num_frames='301'"),
        ({"num_frames": "4"}, "num_frames='4'"),
        ({"num_frames": "many"}, "expected an integer"),
        ({"fps": "25"}, "fps=25"),
        ({"size": "1280*720"}, "WIDTHxHEIGHT"),
        ({"size": "1000x700"}, "Cosmos 3 supports"),
        ({"extra_params": "{not json"}, "Invalid JSON"),
        ({"extra_params": "[1, 2]"}, "expected dict"),
        ({"model": "nvidia/Cosmos3-Nano"}, "Model mismatch"),
        ({"prompt": ""}, "prompt is required"),
    ],
)
def test_bad_fields_are_refused_with_a_message(changes: dict[str, str], message: str) -> None:
    engine = TwinEngine(ready())
    with pytest.raises(TwinError, match=message) as err:
        parse_form({**anchor_workload().form_fields(), **changes}, engine)
    assert err.value.status == 400


# ---- sync ----------------------------------------------------------------------------------------
def test_sync_returns_the_clip_headers_and_model_times() -> None:
    async def body(client: httpx.AsyncClient) -> httpx.Response:
        return await client.post("/v1/videos/sync", files=form(num_inference_steps=35))

    answer = run(ready(), body)
    assert answer.status_code == 200 and answer.headers["content-type"] == "video/mp4"
    info = check_mp4(answer.content)
    assert (info.frames, info.width, info.height, info.fps) == (189, 1280, 720, 24.0)
    predicted = perf_model.predict(anchor_workload(), Plan.parse("cfg2-u4-hsdp8"), resolve_profile("H200"))
    # model seconds, not wall seconds: the time scale only shortens the sleeps
    assert float(answer.headers["X-Inference-Time-S"]) == pytest.approx(predicted.latency_s, rel=0.01)
    stages = json.loads(answer.headers["X-Stage-Durations"])
    assert stages["Cosmos3OmniDiffusersPipeline.diffuse"] == pytest.approx(35 * predicted.per_step_s, rel=0.01)
    assert float(answer.headers["X-Peak-Memory-MB"]) == pytest.approx(predicted.memory_gib_per_gpu * 1024, rel=1e-3)
    assert answer.headers["X-Request-Id"].startswith("video_sync-")
    assert answer.headers["X-Twin-Time-Scale"] == "2000"


def test_one_request_at_a_time_in_arrival_order() -> None:
    async def body(client: httpx.AsyncClient) -> list[tuple[float, float]]:
        async def one(i: int) -> tuple[float, float]:
            await asyncio.sleep(0.005 * i)  # arrive in order 0, 1, 2
            answer = await client.post("/v1/videos/sync", files=form(seed=i))
            return time.monotonic(), float(answer.headers["X-Inference-Time-S"])

        return list(await asyncio.gather(*(one(i) for i in range(3))))

    # a milder scale here: arrivals 5 ms apart are then ~1 model s apart, not ~10
    done = run(TwinConfig(time_scale=200.0, load_time_s=0.0), body)
    finished = [t for t, _ in done]
    assert finished == sorted(finished)  # FIFO
    served = [s for _, s in done]
    # each one waits for the ones before it: about one service time (latency minus the overlapped tail) more
    assert served[1] - served[0] == pytest.approx(110.1, rel=0.1)
    assert served[2] - served[1] == pytest.approx(110.1, rel=0.1)


def test_loading_answers_503_then_ready() -> None:
    async def body(client: httpx.AsyncClient) -> tuple[int, int, int, int]:
        health = (await client.get("/health")).status_code
        work = (await client.post("/v1/videos/sync", files=form())).status_code
        models = (await client.get("/v1/models")).status_code
        await asyncio.sleep(0.25)
        return health, work, models, (await client.get("/health")).status_code

    assert run(TwinConfig(time_scale=SCALE, load_time_s=300.0), body) == (503, 503, 503, 200)


def test_sync_timeout_counts_queue_time_504() -> None:
    async def body(client: httpx.AsyncClient) -> list[int]:
        first = asyncio.create_task(client.post("/v1/videos/sync", files=form()))
        await asyncio.sleep(0.02)
        second = await client.post("/v1/videos/sync", files=form())
        return [(await first).status_code, second.status_code, second.json()["error"]["code"]]

    # 180 model s: the first clip (~120 s) fits, the second waits ~110 s in the queue and does not; at K=200
    # both margins are a quarter of a wall second or more, so a busy machine does not flip the outcome
    assert run(TwinConfig(time_scale=200.0, load_time_s=0.0, sync_timeout_s=180.0), body) == [200, 504, 504]


def test_sync_timeout_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_OMNI_VIDEO_SYNC_TIMEOUT", "1800")
    assert TwinConfig.from_env().sync_timeout_s == 1800.0


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
    assert blocked.status_code == 400 and "guardrails" in blocked.json()["error"]["message"]
    assert _guard(ready(), "a bomb in a warehouse", False).status_code == 200  # the request turns them off
    off = _guard(ready(guardrails=False), "a bomb in a warehouse", True)  # the server's off wins
    assert off.status_code == 200 and "guardrails" not in json.loads(off.headers["X-Stage-Durations"])
    on = _guard(ready(), "a robot in a warehouse", True)
    assert on.status_code == 200 and json.loads(on.headers["X-Stage-Durations"])["guardrails"] > 0


# ---- async jobs ------------------------------------------------------------------------------------
def test_async_job_lifecycle() -> None:
    async def body(client: httpx.AsyncClient) -> dict[str, Any]:
        out: dict[str, Any] = {}
        created = (await client.post("/v1/videos", files=form(num_frames=61))).json()
        out["created"] = created
        out["early_content"] = (await client.get(f"/v1/videos/{created['id']}/content")).status_code
        job = created
        while job["status"] in ("queued", "in_progress"):
            await asyncio.sleep(0.01)
            job = (await client.get(f"/v1/videos/{created['id']}")).json()
        out["done"] = job
        out["content"] = await client.get(f"/v1/videos/{created['id']}/content")
        out["listed"] = (await client.get("/v1/videos")).json()
        out["deleted"] = (await client.delete(f"/v1/videos/{created['id']}")).json()
        out["after"] = (await client.get(f"/v1/videos/{created['id']}")).status_code
        bad = (await client.post("/v1/videos", files=form(prompt="gore", extra_params='{"guardrails": true}'))).json()
        while (failed := await client.get(f"/v1/videos/{bad['id']}")).json()["status"] != "failed":
            await asyncio.sleep(0.01)
        out["failed"] = failed
        out["failed_content"] = (await client.get(f"/v1/videos/{bad['id']}/content")).status_code
        return out

    out = run(ready(), body)
    assert out["created"]["status"] == "queued" and out["created"]["id"].startswith("video_gen_")
    assert out["created"]["object"] == "video" and out["created"]["progress"] == 0
    assert out["early_content"] == 404
    done = out["done"]
    assert done["status"] == "completed" and done["progress"] == 100 and done["inference_time_s"] > 0
    assert done["num_frames"] == 61 and done["peak_memory_mb"] > 0 and done["stage_durations"]
    assert check_mp4(out["content"].content).frames == 61
    assert out["listed"]["object"] == "list" and out["listed"]["first_id"] == done["id"]
    assert out["deleted"] == {"id": done["id"], "deleted": True, "object": "video.deleted"}
    assert out["after"] == 404
    assert out["failed"].status_code == 400 and out["failed"].json()["error"]["code"] == 400
    assert out["failed_content"] == 422


def test_replicas_from_the_flag_or_the_plan_prefix() -> None:
    from worldtune.tools.twin import replica_count

    assert replica_count(TwinConfig(plan="2xcfg2-u2-hsdp4"), None) == 2
    assert replica_count(TwinConfig(plan="cfg2-u4-hsdp8"), None) == 1
    assert replica_count(TwinConfig(plan="cfg2-u4-hsdp8"), 3) == 3
    with pytest.raises(ValueError, match="replicas"):
        replica_count(TwinConfig(), 0)
