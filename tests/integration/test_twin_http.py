"""The twin over real HTTP on loopback, driven with plain curl exactly as vLLM-Omni's API is used.

Each test names the real behaviour it holds the twin to (vllm-omni 0.30.0); see tools/twin*.py for the sources."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from worldtune.tools.backends.local import free_port
from worldtune.tools.plans.estimate import resolve_profile
from worldtune.tools.twin.video import check_mp4

pytestmark = pytest.mark.integration

EXTRA = '{"use_resolution_template":false,"use_duration_template":false,"guardrails":false}'
ANCHOR_FORM = [
    "-F", "prompt=A humanoid robot walks through a sunlit warehouse.", "-F", "negative_prompt=blurry",
    "-F", "size=1280x720", "-F", "num_frames=189", "-F", "fps=24", "-F", "num_inference_steps=35",
    "-F", "guidance_scale=6.0", "-F", "flow_shift=10.0", "-F", "seed=17", "-F", f"extra_params={EXTRA}",
]  # fmt: skip


@contextmanager
def twin(
    *args: str, env: dict[str, str] | None = None, wait: bool = True
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A `worldtune twin` process on a free loopback port; stopped (by its pid) whatever happens.

    wait: until /health is 200. While it loads the twin refuses connections (curl's code 000), as vLLM-Omni does.
    """
    port = free_port()
    cmd = [sys.executable, "-m", "worldtune.cli", "twin", "--port", str(port), *args]
    proc = subprocess.Popen(cmd, env={**os.environ, **(env or {})}, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while wait and time.monotonic() < deadline:
            if curl("-o", "/dev/null", "-w", "%{http_code}", f"{url}/health").stdout == "200":
                break
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else "twin exited"
            time.sleep(0.05)
        else:
            if wait:
                pytest.fail("twin did not answer /health")
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.terminate()
        proc.wait(timeout=10)


def curl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["curl", "-s", *args], capture_output=True, text=True, timeout=60, check=False)


def headers_of(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines()[1:]:
        if ":" in line:
            key, _, value = line.partition(":")
            out[key.strip().lower()] = value.strip()
    return out


def test_sync_with_curl_returns_the_mp4_and_headers(tmp_path: Path) -> None:
    with twin("--time-scale", "200", "--load-time", "0", "--enable-diffusion-pipeline-profiler") as (url, _):
        out, head = tmp_path / "clip.mp4", tmp_path / "headers.txt"
        done = curl("-X", "POST", f"{url}/v1/videos/sync", *ANCHOR_FORM, "-D", str(head), "-o", str(out),
                    "-w", "%{http_code}")  # fmt: skip
        assert done.stdout == "200"
        headers = headers_of(head)
        assert headers["content-type"] == "video/mp4"
        assert headers["x-request-id"].startswith("video_sync-")
        assert 110.0 < float(headers["x-inference-time-s"]) < 130.0  # model seconds of cfg2-u4-hsdp8 on H200
        stages = json.loads(headers["x-stage-durations"])
        assert set(stages) == {"Cosmos3OmniDiffusersPipeline.diffuse", "Cosmos3OmniDiffusersPipeline.vae.decode",
                               "queue_wait_ms", "stage_0_gen_ms"}  # fmt: skip
        assert 30_000 < float(headers["x-peak-memory-mb"]) < 60_000
        info = check_mp4(out.read_bytes())
        assert (info.frames, info.width, info.height, info.fps) == (189, 1280, 720, 24.0)
        assert "guardrails" not in " ".join(stages)  # the pipeline profiler has no guardrail stage
        models = json.loads(curl(f"{url}/v1/models").stdout)
        card = models["data"][0]
        assert card["id"] == "nvidia/Cosmos3-Super" and card["owned_by"] == "vllm" and card["created"] > 1.7e9
        assert card["max_model_len"] is None and card["permission"][0]["object"] == "model_permission"
        assert json.loads(curl(f"{url}/v1/nope").stdout) == {"detail": "Not Found"}


def test_without_the_profiler_flag_stage_durations_are_empty_and_frames_round_up(tmp_path: Path) -> None:
    # vLLM-Omni's benchmark's documented example: 854x480, 120 frames, 18 steps
    with twin("--time-scale", "200", "--load-time", "0") as (url, _):
        out, head = tmp_path / "clip.mp4", tmp_path / "headers.txt"
        form = ["-F", "prompt=a robot", "-F", "width=854", "-F", "height=480", "-F", "num_frames=120",
                "-F", "num_inference_steps=18"]  # fmt: skip
        done = curl("-X", "POST", f"{url}/v1/videos/sync", *form, "-D", str(head), "-o", str(out), "-w", "%{http_code}")
        assert done.stdout == "200"
        assert headers_of(head)["x-stage-durations"] == "{}"
        info = check_mp4(out.read_bytes())
        assert (info.frames, info.width, info.height) == (121, 848, 480)
        job = json.loads(curl("-X", "POST", f"{url}/v1/videos", *form).stdout)
        assert job["num_frames"] == 120 and job["duration_s"] == 5.0
        while job["status"] not in ("completed", "failed"):
            time.sleep(0.05)
            job = json.loads(curl(f"{url}/v1/videos/{job['id']}").stdout)
        assert (job["num_frames"], job["fps"], job["stage_durations"]) == (121, 24.0, {})


def test_async_with_curl_create_poll_download_delete_list(tmp_path: Path) -> None:
    with twin("--time-scale", "200", "--load-time", "0") as (url, _):
        job = json.loads(curl("-X", "POST", f"{url}/v1/videos", *ANCHOR_FORM, "-F", "num_frames=61").stdout)
        assert job["status"] == "queued" and job["object"] == "video" and job["id"].startswith("video_gen_")
        statuses = set()
        while job["status"] not in ("completed", "failed"):
            time.sleep(0.05)
            job = json.loads(curl(f"{url}/v1/videos/{job['id']}").stdout)
            statuses.add(job["status"])
        assert job["status"] == "completed" and job["progress"] == 100
        assert job["inference_time_s"] > 0 and job["peak_memory_mb"] > 0 and job["stage_durations"] == {}
        out = tmp_path / "job.mp4"
        code = curl(f"{url}/v1/videos/{job['id']}/content", "-o", str(out), "-w", "%{http_code}").stdout
        assert code == "200" and check_mp4(out.read_bytes()).frames == 61
        listed = json.loads(curl(f"{url}/v1/videos").stdout)
        assert [j["id"] for j in listed["data"]] == [job["id"]]
        deleted = json.loads(curl("-X", "DELETE", f"{url}/v1/videos/{job['id']}").stdout)
        assert deleted == {"id": job["id"], "deleted": True, "object": "video.deleted"}
        assert curl("-o", "/dev/null", "-w", "%{http_code}", f"{url}/v1/videos/{job['id']}").stdout == "404"


def test_bad_fields_get_400_with_the_real_error_body() -> None:
    with twin("--time-scale", "200", "--load-time", "0") as (url, _):
        for field, kind, expect in (
            ("num_inference_steps=500", "BadRequestError", "num_inference_steps"),
            ("num_frames=0", "BadRequestError", "num_frames"),
            ("guidance_scale=25", "BadRequestError", "guidance_scale"),
            ("quality=ultra", "BadRequestError", "quality"),
            ("seed=100000000000000000000000", "BadRequestError", "seed"),
            ("fps=0.5", "Bad Request", "body.fps"),
            ("size=1000*700", "Bad Request", "body.size"),
        ):
            done = curl("-X", "POST", f"{url}/v1/videos/sync", *ANCHOR_FORM, "-F", field, "-w", "\n%{http_code}")
            body, _, code = done.stdout.rpartition("\n")
            assert code == "400", field
            error = json.loads(body)["error"]
            assert error["type"] == kind and expect in error["message"], (field, error)
        missing = curl("-X", "POST", f"{url}/v1/videos/sync", "-F", "size=1280x720", "-w", "\n%{http_code}")
        body, _, code = missing.stdout.rpartition("\n")
        assert code == "400" and json.loads(body)["error"]["param"] == "body.prompt"


def test_loading_refuses_connections_then_serves() -> None:
    # 300 model seconds of loading at K=100: three wall seconds during which the port is bound but not listening
    with twin("--time-scale", "100", "--load-time", "300", wait=False) as (url, proc):
        assert proc.stderr is not None
        line = proc.stderr.readline().decode()  # the twin says so once its port is bound
        assert "bound" in line and "loading" in line, line
        probe = curl("-o", "/dev/null", "-w", "%{http_code}", f"{url}/health")
        assert (probe.returncode, probe.stdout) == (7, "000")  # curl: connection refused, not an HTTP 503
        deadline = time.monotonic() + 60
        while curl("-o", "/dev/null", "-w", "%{http_code}", f"{url}/health").stdout != "200":
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)


def test_a_killed_engine_turns_health_503_and_work_500_then_the_server_stops() -> None:
    env = {"VLLM_KEEP_ALIVE_ON_ENGINE_DEATH": "1"}
    with twin("--time-scale", "200", "--load-time", "0", env=env) as (url, proc):
        proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 30
        while (health := curl("-w", "\n%{http_code}", f"{url}/health").stdout).rpartition("\n")[2] != "503":
            assert time.monotonic() < deadline, health
            time.sleep(0.05)
        assert json.loads(health.rpartition("\n")[0]) == {"status": "unhealthy"}
        work = curl("-X", "POST", f"{url}/v1/videos/sync", *ANCHOR_FORM, "-w", "\n%{http_code}").stdout
        body, _, code = work.rpartition("\n")
        assert code == "500" and "EngineCore encountered an issue" in json.loads(body)["error"]["message"]
    with twin("--time-scale", "200", "--load-time", "0") as (url, proc):
        proc.send_signal(signal.SIGUSR1)
        assert proc.wait(timeout=30) == 0  # the watchdog stops a server whose engine died (5 model s)


def test_a_plan_that_does_not_fit_fails_the_load_and_exits(tmp_path: Path) -> None:
    truth = tmp_path / "truth.yaml"
    resolve_profile("H200").with_changes(runtime_gib=30.0).dump(truth)
    with twin("--plan", "1gpu", "--profile", str(truth), "--time-scale", "100", wait=False) as (url, proc):
        while proc.poll() is None:
            probe = curl("-o", "/dev/null", "-w", "%{http_code}", f"{url}/health")
            assert probe.stdout in ("000", ""), probe.stdout  # never served
            time.sleep(0.1)
        assert proc.returncode == 1
        err = proc.stderr.read().decode() if proc.stderr else ""
        assert "torch.OutOfMemoryError: CUDA out of memory" in err and "Initialization failed" in err


def test_sync_timeout_with_a_queued_request_is_504(tmp_path: Path) -> None:
    # the server's own timeout, 200 model s, counts queue time: the first clip (~120 s) fits, the second
    # (queued ~110 s behind it) does not
    env = {"VLLM_OMNI_VIDEO_SYNC_TIMEOUT": "200"}
    with twin("--time-scale", "100", "--load-time", "0", env=env) as (url, _):
        args = ["curl", "-s", "-o", str(tmp_path / "first.mp4"), "-w", "%{http_code}", "-X", "POST",
                f"{url}/v1/videos/sync", *ANCHOR_FORM]  # fmt: skip
        first = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
        time.sleep(0.1)
        second = curl("-X", "POST", f"{url}/v1/videos/sync", *ANCHOR_FORM, "-w", "\n%{http_code}").stdout
        out, _ = first.communicate(timeout=30)
        assert out == "200"
        body, _, code = second.rpartition("\n")
        error = json.loads(body)["error"]
        assert code == "504" and "timed out after 200" in error["message"] and error["type"] == "Gateway Timeout"


def test_image_to_video_upload_with_curl(tmp_path: Path) -> None:
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\x60" * 320 for _ in range(180))
    image = tmp_path / "frame.png"
    image.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 320, 180, 8, 0, 0, 0, 0))
                      + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))  # fmt: skip
    with twin("--time-scale", "200", "--load-time", "0", "--enable-diffusion-pipeline-profiler") as (url, _):
        out, head = tmp_path / "i2v.mp4", tmp_path / "headers.txt"
        done = curl("-X", "POST", f"{url}/v1/videos/sync", "-F", "prompt=the robot walks", "-F", "num_frames=17",
                    "-F", "num_inference_steps=4", "-F", f"input_reference=@{image};type=image/png",
                    "-D", str(head), "-o", str(out), "-w", "%{http_code}")  # fmt: skip
        assert done.stdout == "200"
        stages = json.loads(headers_of(head)["x-stage-durations"])
        assert stages["Cosmos3OmniDiffusersPipeline.vae.encode"] > 0  # timed as image-to-video
        info = check_mp4(out.read_bytes())
        assert (info.width, info.height, info.frames) == (1280, 720, 17)  # the image's 16:9 at 720p's area
