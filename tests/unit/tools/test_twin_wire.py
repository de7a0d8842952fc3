"""The twin's wire form against vLLM-Omni 0.30's: validation, error bodies, frames, /v1/models, image-to-video."""

from __future__ import annotations

import asyncio
import json
import struct
import zlib
from typing import Any

import httpx
import pytest

from worldtune.tools.twin.form import image_size
from worldtune.tools.twin.server import TwinConfig, create_app
from worldtune.tools.twin.video import check_mp4, served_frames, served_size

SCALE = 2000.0


def png(width: int, height: int) -> bytes:
    """A valid grey PNG (8-bit greyscale, one filter byte per row)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    pixels = zlib.compress(b"".join(b"\x00" + b"\x60" * width for _ in range(height)))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


def call(method: str, path: str, fields: dict[str, str] | None = None, model: str = "cosmos3-super",
         files: dict[str, tuple[str, bytes, str]] | None = None, **config: Any) -> httpx.Response:  # fmt: skip
    app, _ = create_app(TwinConfig(model=model, time_scale=SCALE, load_time_s=0.0, **config))
    parts: list[Any] = [(k, (None, v)) for k, v in (fields or {}).items()]
    parts += list((files or {}).items())

    async def main() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://twin") as client:
            if method == "GET":
                return await client.get(path)
            return await client.post(path, files=parts)

    return asyncio.run(main())


def small(**fields: str) -> dict[str, str]:
    """A short request (4 steps, 256x256, 17 frames) so each test's clip is quick to make."""
    return {"prompt": "a robot", "size": "256x256", "num_frames": "17", "num_inference_steps": "4", **fields}


# ---- validation as the real server's -----------------------------------------------------------------------
def test_the_vllm_omni_benchmark_example_is_served_with_frames_rounded_up() -> None:
    # benchmarks/diffusion/diffusion_benchmark_serving.py's documented example: 854x480, 120 frames, 18 steps
    answer = call("POST", "/v1/videos/sync", {"prompt": "a robot", "width": "854", "height": "480",
                                              "num_frames": "120", "num_inference_steps": "18"})  # fmt: skip
    assert answer.status_code == 200, answer.text
    info = check_mp4(answer.content)
    assert (info.frames, info.width, info.height) == (121, 848, 480)  # 4k + 1 frames; sides to multiples of 16


@pytest.mark.parametrize(
    "fields",
    [
        {"fps": "23.976"},
        {"num_frames": "1"},
        {"size": "1000x700"},
        {"seed": str(2**63 - 1)},
        {"quality": "lossless"},
        {"fps": "60"},
        {"seconds": "1", "num_frames": ""},
    ],
)
def test_values_the_real_server_accepts_are_served(fields: dict[str, str]) -> None:
    assert call("POST", "/v1/videos/sync", small(**fields)).status_code == 200


@pytest.mark.parametrize(
    ("fields", "kind", "param", "text"),
    [
        # the form layer (FastAPI's RequestValidationError): "Bad Request", param body.<field>
        ({"fps": "0.5"}, "Bad Request", "body.fps", "greater_than_equal"),
        ({"fps": "inf"}, "Bad Request", "body.fps", "finite_number"),
        ({"size": "1280*720"}, "Bad Request", "body.size", "string_pattern_mismatch"),
        ({"seconds": "0"}, "Bad Request", "body.seconds", "string_pattern_mismatch"),
        ({"num_frames": "many"}, "Bad Request", "body.num_frames", "int_parsing"),
        ({"prompt": ""}, "Bad Request", "body.prompt", "missing"),
        # the request model (pydantic's ValidationError): "BadRequestError" with pydantic's text
        ({"quality": "ultra"}, "BadRequestError", None, "quality must be one of ['lossless', 'high']"),
        ({"seed": str(10**23)}, "BadRequestError", None, "less than or equal to 9223372036854775807"),
        ({"num_inference_steps": "201"}, "BadRequestError", None, "num_inference_steps"),
        ({"guidance_scale": "21"}, "BadRequestError", None, "guidance_scale"),
        ({"num_frames": "0"}, "BadRequestError", None, "num_frames"),
        ({"width": "0"}, "BadRequestError", None, "width"),
        # the handler's own HTTPExceptions: the status phrase
        ({"extra_params": "{not json"}, "Bad Request", None, "Invalid JSON in form field."),
        ({"extra_params": "[1, 2]"}, "Bad Request", None, "expected dict, got list"),
        ({"model": "nvidia/Cosmos3-Nano"}, "Bad Request", None, "Model mismatch"),
    ],
)
def test_refusals_carry_the_real_error_body(fields: dict[str, str], kind: str, param: str | None, text: str) -> None:
    answer = call("POST", "/v1/videos/sync", small(**fields))
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert (error["type"], error["param"], error["code"]) == (kind, param, 400)
    assert text in error["message"]


# ---- frames and the job record ------------------------------------------------------------------------------
def test_a_job_leaves_frames_null_until_the_clip_says_and_then_takes_the_clips() -> None:
    app, _ = create_app(TwinConfig(time_scale=SCALE, load_time_s=0.0))

    async def main() -> list[dict[str, Any]]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://twin") as client:
            out = []
            for fields in ({"prompt": "a", "size": "256x256", "num_inference_steps": "4"},
                           {"prompt": "b", "size": "256x256", "num_inference_steps": "4", "seconds": "5"}):  # fmt: skip
                created = (await client.post("/v1/videos", files=[(k, (None, v)) for k, v in fields.items()])).json()
                out.append(created)
                for _ in range(2000):
                    job = (await client.get(f"/v1/videos/{created['id']}")).json()
                    if job["status"] == "completed":
                        break
                    await asyncio.sleep(0.005)
                out.append(job)
            return out

    plain, plain_done, timed, timed_done = asyncio.run(main())
    assert (plain["num_frames"], plain["duration_s"], plain["fps"], plain["seconds"]) == (None, None, 24.0, "4")
    assert (plain_done["num_frames"], plain_done["duration_s"]) == (189, pytest.approx(189 / 24))
    assert (timed["num_frames"], timed["duration_s"], timed["seconds"]) == (120, 5.0, "5")  # seconds x fps
    assert (timed_done["num_frames"], timed_done["duration_s"]) == (121, pytest.approx(121 / 24))


def test_served_frames_and_size_follow_the_pipeline() -> None:
    assert [served_frames(n) for n in (1, 2, 5, 120, 121, 189)] == [1, 5, 5, 121, 121, 189]
    assert served_size(854, 480) == (848, 480) and served_size(1280, 720) == (1280, 720)


# ---- other routes --------------------------------------------------------------------------------------------
def test_unknown_routes_and_missing_jobs_answer_as_fastapi_and_vllm_do() -> None:
    assert call("GET", "/v1/nothing").json() == {"detail": "Not Found"}
    missing = call("GET", "/v1/videos/video_gen_nope").json()["error"]
    assert (missing["type"], missing["message"], missing["code"]) == ("Not Found", "Video not found", 404)
    limit = call("GET", "/v1/videos?limit=101").json()["error"]
    assert (limit["type"], limit["param"]) == ("Bad Request", "query.limit")


def test_models_lists_a_vllm_model_card() -> None:
    card = call("GET", "/v1/models").json()["data"][0]
    assert card["owned_by"] == "vllm" and card["max_model_len"] is None and card["root"] == "nvidia/Cosmos3-Super"
    assert card["created"] > 1_700_000_000  # a Unix time, not a monotonic clock
    assert card["permission"][0]["object"] == "model_permission" and card["permission"][0]["allow_sampling"]


# ---- image-to-video ------------------------------------------------------------------------------------------
def test_an_input_reference_is_timed_as_image_to_video() -> None:
    image = {"input_reference": ("frame.png", png(640, 360), "image/png")}
    fields = {"prompt": "a robot", "num_frames": "17", "num_inference_steps": "4"}
    i2v = call("POST", "/v1/videos/sync", fields, files=image, stage_profiler=True)
    t2v = call("POST", "/v1/videos/sync", {**fields, "size": "1280x720"}, stage_profiler=True)
    assert i2v.status_code == 200, i2v.text
    # no size sent: the image's aspect at 720p's area (pipeline_cosmos3.py), 16:9 -> 1280x720
    info = check_mp4(i2v.content)
    assert (info.width, info.height, info.frames) == (1280, 720, 17)
    # the conditioning frame's VAE encode is a stage of its own, and only I2V has it
    assert json.loads(i2v.headers["X-Stage-Durations"])["Cosmos3OmniDiffusersPipeline.vae.encode"] > 0
    assert "Cosmos3OmniDiffusersPipeline.vae.encode" not in json.loads(t2v.headers["X-Stage-Durations"])


def test_the_distilled_image_to_video_checkpoint_refuses_text_to_video() -> None:
    model = "cosmos3-super-i2v-4step"
    t2v = call("POST", "/v1/videos/sync", small(), model=model)
    assert t2v.status_code == 500 and "text-to-video requests are unsupported" in t2v.json()["error"]["message"]
    image = {"input_reference": ("frame.png", png(256, 256), "image/png")}
    i2v = call("POST", "/v1/videos/sync", small(guidance_scale="6.0"), model=model, files=image)
    assert i2v.status_code == 200  # guidance is forced to 1.0, not refused
    bad = call("POST", "/v1/videos/sync", small(), model=model, files={"input_reference": ("x", b"no", "image/png")})
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "Bad Request"


def test_image_size_reads_png_and_jpeg_headers() -> None:
    assert image_size(png(640, 360)) == (640, 360)
    app0 = b"\xff\xe0" + struct.pack(">H", 4) + b"\x00\x00"
    sof = b"\xff\xc0" + struct.pack(">HBHH", 11, 8, 360, 640)
    assert image_size(b"\xff\xd8" + app0 + sof + b"\x00" * 8) == (640, 360)
    assert image_size(b"GIF89a") is None


def test_a_request_the_pipeline_cannot_run_fails_and_never_leaves_a_job_hanging() -> None:
    sync = call("POST", "/v1/videos/sync", small(size="8x8"))
    assert sync.status_code == 500 and sync.json()["error"]["type"] == "Internal Server Error"
    app, _ = create_app(TwinConfig(time_scale=SCALE, load_time_s=0.0))

    async def main() -> dict[str, Any]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://twin") as client:
            parts = [(k, (None, v)) for k, v in small(size="8x8").items()]
            created = (await client.post("/v1/videos", files=parts)).json()
            for _ in range(2000):
                job = (await client.get(f"/v1/videos/{created['id']}")).json()
                if job["status"] == "failed":
                    return dict(job)
                await asyncio.sleep(0.005)
            raise AssertionError("the job never failed")

    job = asyncio.run(main())
    assert job["error"]["code"] == 500 and job["inference_time_s"] is not None
