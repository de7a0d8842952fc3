"""The twin over real HTTP on loopback, driven with plain curl exactly as vLLM-Omni's API is used."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from worldtune.tools.video import check_mp4

pytestmark = pytest.mark.integration

EXTRA = '{"use_resolution_template":false,"use_duration_template":false,"guardrails":false}'
ANCHOR_FORM = [
    "-F", "prompt=A humanoid robot walks through a sunlit warehouse.", "-F", "negative_prompt=blurry",
    "-F", "size=1280x720", "-F", "num_frames=189", "-F", "fps=24", "-F", "num_inference_steps=35",
    "-F", "guidance_scale=6.0", "-F", "flow_shift=10.0", "-F", "seed=17", "-F", f"extra_params={EXTRA}",
]  # fmt: skip


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def twin(*args: str, env: dict[str, str] | None = None, wait: bool = True) -> Iterator[str]:
    """A `worldtune twin` process on a free loopback port; stopped (by its pid) whatever happens."""
    port = free_port()
    cmd = [sys.executable, "-m", "worldtune.cli", "twin", "--port", str(port), *args]
    proc = subprocess.Popen(cmd, env={**os.environ, **(env or {})}, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            code = curl("-o", "/dev/null", "-w", "%{http_code}", f"{url}/health").stdout
            if code == "200" or (code == "503" and not wait):
                break
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else "twin exited"
            time.sleep(0.05)
        else:
            pytest.fail("twin did not answer /health")
        yield url
    finally:
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
    with twin("--time-scale", "200", "--load-time", "0") as url:
        out, head = tmp_path / "clip.mp4", tmp_path / "headers.txt"
        done = curl("-X", "POST", f"{url}/v1/videos/sync", *ANCHOR_FORM, "-D", str(head), "-o", str(out),
                    "-w", "%{http_code}")  # fmt: skip
        assert done.stdout == "200"
        headers = headers_of(head)
        assert headers["content-type"] == "video/mp4"
        assert headers["x-request-id"].startswith("video_sync-")
        assert 110.0 < float(headers["x-inference-time-s"]) < 130.0  # model seconds of cfg2-u4-hsdp8 on H200
        stages = json.loads(headers["x-stage-durations"])
        assert set(stages) >= {"Cosmos3OmniDiffusersPipeline.diffuse", "Cosmos3OmniDiffusersPipeline.forward"}
        assert 30_000 < float(headers["x-peak-memory-mb"]) < 60_000
        info = check_mp4(out.read_bytes())
        assert (info.frames, info.width, info.height, info.fps) == (189, 1280, 720, 24.0)
        models = json.loads(curl(f"{url}/v1/models").stdout)
        assert models["data"][0]["id"] == "nvidia/Cosmos3-Super"


def test_async_with_curl_create_poll_download_delete_list(tmp_path: Path) -> None:
    with twin("--time-scale", "200", "--load-time", "0") as url:
        job = json.loads(curl("-X", "POST", f"{url}/v1/videos", *ANCHOR_FORM, "-F", "num_frames=61").stdout)
        assert job["status"] == "queued" and job["object"] == "video" and job["id"].startswith("video_gen_")
        statuses = set()
        while job["status"] not in ("completed", "failed"):
            time.sleep(0.05)
            job = json.loads(curl(f"{url}/v1/videos/{job['id']}").stdout)
            statuses.add(job["status"])
        assert job["status"] == "completed" and job["progress"] == 100
        assert job["inference_time_s"] > 0 and job["peak_memory_mb"] > 0 and job["stage_durations"]
        out = tmp_path / "job.mp4"
        code = curl(f"{url}/v1/videos/{job['id']}/content", "-o", str(out), "-w", "%{http_code}").stdout
        assert code == "200" and check_mp4(out.read_bytes()).frames == 61
        listed = json.loads(curl(f"{url}/v1/videos").stdout)
        assert [j["id"] for j in listed["data"]] == [job["id"]]
        deleted = json.loads(curl("-X", "DELETE", f"{url}/v1/videos/{job['id']}").stdout)
        assert deleted == {"id": job["id"], "deleted": True, "object": "video.deleted"}
        assert curl("-o", "/dev/null", "-w", "%{http_code}", f"{url}/v1/videos/{job['id']}").stdout == "404"


def test_bad_fields_get_400_with_a_message() -> None:
    with twin("--time-scale", "200", "--load-time", "0") as url:
        for field, expect in (("num_inference_steps=500", "num_inference_steps"), ("num_frames=3", "num_frames"),
                              ("guidance_scale=25", "guidance_scale"), ("size=1000x700", "size")):  # fmt: skip
            done = curl("-X", "POST", f"{url}/v1/videos/sync", *ANCHOR_FORM, "-F", field, "-w", "\n%{http_code}")
            body, _, code = done.stdout.rpartition("\n")
            assert code == "400", field
            assert expect in json.loads(body)["error"]["message"]
        missing = curl("-X", "POST", f"{url}/v1/videos/sync", "-F", "size=1280x720", "-w", "\n%{http_code}")
        assert missing.stdout.endswith("400") and "prompt" in missing.stdout


def test_loading_answers_503_on_health_and_work() -> None:
    # 300 model seconds of loading at K=100: three wall seconds
    with twin("--time-scale", "100", "--load-time", "300", wait=False) as url:
        assert curl("-o", "/dev/null", "-w", "%{http_code}", f"{url}/health").stdout == "503"
        work = curl("-X", "POST", f"{url}/v1/videos/sync", *ANCHOR_FORM, "-w", "\n%{http_code}").stdout
        assert work.endswith("503") and "loading" in work
        deadline = time.monotonic() + 20
        while curl("-o", "/dev/null", "-w", "%{http_code}", f"{url}/health").stdout != "200":
            assert time.monotonic() < deadline
            time.sleep(0.1)


def test_sync_timeout_with_a_queued_request_is_504(tmp_path: Path) -> None:
    # the server's own timeout, 200 model s, counts queue time: the first clip (~120 s) fits, the second
    # (queued ~110 s behind it) does not
    env = {"VLLM_OMNI_VIDEO_SYNC_TIMEOUT": "200"}
    with twin("--time-scale", "100", "--load-time", "0", env=env) as url:
        args = ["curl", "-s", "-o", str(tmp_path / "first.mp4"), "-w", "%{http_code}", "-X", "POST",
                f"{url}/v1/videos/sync", *ANCHOR_FORM]  # fmt: skip
        first = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
        time.sleep(0.1)
        second = curl("-X", "POST", f"{url}/v1/videos/sync", *ANCHOR_FORM, "-w", "\n%{http_code}").stdout
        out, _ = first.communicate(timeout=30)
        assert out == "200"
        body, _, code = second.rpartition("\n")
        assert code == "504" and "timed out after 200" in json.loads(body)["error"]["message"]
