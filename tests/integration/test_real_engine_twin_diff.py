"""The twin held to the real vLLM-Omni 0.30.0: the same requests to both, the answers compared.

Good and bad inputs (sizes, frame counts, missing and malformed fields, no key and a wrong key, the async job
lifecycle, unknown ids and routes) go to the real server on one CPU rank (tests/integration/real_engine.py) and to
`worldtune twin` started as worldtune starts it. Compared: status codes, error bodies (exactly), the keys of JSON
answers, header names, stage-duration names, and each clip's frames, size and fps. Not compared, on purpose: the
values of times and memory (the twin models GPUs; here the real one runs a 1-layer model on a CPU), the served model
name (the twin serves the catalogue's Hugging Face id, the real server the path it was given), ids and dates, and
the twin's own clock headers (x-twin-*, which a real server never sends and the benchmark reads only when present).
The table is written to .cache/real-engine-diff.json.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from real_engine import KEY, ROOT, RealServer, tiny_cosmos3

from worldtune.tools.backends.local import free_port
from worldtune.tools.twin.video import check_mp4

pytestmark = pytest.mark.integration

IGNORED_HEADERS = {"date", "server", "content-length"}
VOLATILE = {"id", "model", "root", "created", "created_at", "completed_at", "inference_time_s", "peak_memory_mb",
            "file_name", "first_id", "last_id"}  # fmt: skip
GOOD = {"prompt": "a robot arm picks up red cube", "size": "256x256", "num_frames": "5", "num_inference_steps": "2",
        "extra_params": json.dumps({"guardrails": False})}  # fmt: skip


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    folder = tmp_path_factory.mktemp("diff")
    port = free_port()
    with open(folder / "twin.log", "wb") as log:
        twin = subprocess.Popen(
            [sys.executable, "-m", "worldtune.cli", "twin", "--port", str(port), "--time-scale", "10000",
             "--load-time", "0", "--enable-diffusion-pipeline-profiler", "--no-guardrails", "--api-key", KEY],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        with RealServer(tiny_cosmos3(), folder / "real.log") as real:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 120
            while True:  # the twin answers /health once loaded (no load time here)
                try:
                    if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert twin.poll() is None and time.monotonic() < deadline, (folder / "twin.log").read_text()
                time.sleep(0.2)
            yield {"real": real.url, "twin": url}
    finally:
        twin.terminate()
        twin.wait(30)


def _form(**changes: str | None) -> list[tuple[str, tuple[None, str]]]:
    fields = {**GOOD, **changes}
    return [(k, (None, v)) for k, v in fields.items() if v is not None]


AUTH = {"key": {"Authorization": f"Bearer {KEY}"}, "none": {}, "wrong": {"Authorization": "Bearer not-the-key"}}
# (case, method, path, form changes or None for no body, which key)
CASES: list[tuple[str, str, str, dict[str, str | None] | None, str]] = [
    ("health, no key", "GET", "/health", None, "none"),
    ("models, no key", "GET", "/v1/models", None, "none"),
    ("models, wrong key", "GET", "/v1/models", None, "wrong"),
    ("models", "GET", "/v1/models", None, "key"),
    ("sync", "POST", "/v1/videos/sync", {}, "key"),
    ("sync, guardrails asked of a server without", "POST", "/v1/videos/sync",
     {"extra_params": json.dumps({"guardrails": True})}, "key"),
    ("sync, 250x250 (rounded to 16)", "POST", "/v1/videos/sync", {"size": "250x250"}, "key"),
    ("sync, 6 frames (rounded to 4k+1)", "POST", "/v1/videos/sync", {"num_frames": "6"}, "key"),
    ("sync, no prompt", "POST", "/v1/videos/sync", {"prompt": None}, "key"),
    ("sync, size abc", "POST", "/v1/videos/sync", {"size": "abc"}, "key"),
    ("sync, 0 frames", "POST", "/v1/videos/sync", {"num_frames": "0"}, "key"),
    ("sync, frames abc", "POST", "/v1/videos/sync", {"num_frames": "abc"}, "key"),
    ("sync, 0 steps", "POST", "/v1/videos/sync", {"num_inference_steps": "0"}, "key"),
    ("sync, extra_params not JSON", "POST", "/v1/videos/sync", {"extra_params": "{nope"}, "key"),
    ("sync, no key", "POST", "/v1/videos/sync", {}, "none"),
    ("sync, wrong key", "POST", "/v1/videos/sync", {}, "wrong"),
    ("job, unknown id", "GET", "/v1/videos/video_gen_nope", None, "key"),
    ("job content, unknown id", "GET", "/v1/videos/video_gen_nope/content", None, "key"),
    ("unknown route", "GET", "/v1/nope", None, "key"),
]  # fmt: skip


def _answer(client: httpx.Client, method: str, path: str, form: Any, auth: str) -> httpx.Response:
    files = _form(**form) if form is not None else None
    return client.request(method, path, files=files, headers=AUTH[auth], timeout=300)


def _shape(answer: httpx.Response) -> dict[str, Any]:
    """What is compared of an answer (see the module docstring)."""
    headers = sorted(h for h in answer.headers if h not in IGNORED_HEADERS and not h.startswith("x-twin-"))
    shape: dict[str, Any] = {"status": answer.status_code, "headers": headers}
    kind = answer.headers.get("content-type", "")
    if kind.startswith("video/mp4"):
        info = check_mp4(answer.content)
        shape["clip"] = [info.frames, info.width, info.height, info.fps]
        shape["stages"] = sorted(json.loads(answer.headers.get("x-stage-durations", "{}")))
    elif "json" in kind:
        body = answer.json()
        if answer.status_code >= 400:
            shape["body"] = body
        else:
            shape["body"] = _keys(body)
    return shape


def _keys(body: Any) -> Any:
    """A JSON answer's keys, and the values that are not volatile (ids, dates, times, memory, the model's name)."""
    if isinstance(body, dict):
        shape = {k: ("..." if k in VOLATILE else _keys(v)) for k, v in body.items()}
        if isinstance(body.get("stage_durations"), dict):
            shape["stage_durations"] = sorted(body["stage_durations"])
        return shape
    if isinstance(body, list):
        return [_keys(v) for v in body[:1]]
    return body


def _lifecycle(client: httpx.Client) -> list[tuple[str, dict[str, Any]]]:
    """The async job: create, poll until done, content, list, delete, then the deleted job and its content."""
    key = AUTH["key"]
    out = []
    created = client.post("/v1/videos", files=_form(), headers=key, timeout=60)
    out.append(("job create", _shape(created)))
    video = created.json()["id"]
    deadline = time.monotonic() + 300
    while True:
        got = client.get(f"/v1/videos/{video}", headers=key, timeout=60)
        if got.json().get("status") in ("completed", "failed") or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    out.append(("job get, done", _shape(got)))
    out.append(("job content", _shape(client.get(f"/v1/videos/{video}/content", headers=key, timeout=60))))
    out.append(("job list", _shape(client.get("/v1/videos", headers=key, timeout=60))))
    out.append(("job delete", _shape(client.delete(f"/v1/videos/{video}", headers=key, timeout=60))))
    out.append(("job get, deleted", _shape(client.get(f"/v1/videos/{video}", headers=key, timeout=60))))
    out.append(("job content, deleted", _shape(client.get(f"/v1/videos/{video}/content", headers=key, timeout=60))))
    out.append(("job list, empty", _shape(client.get("/v1/videos", headers=key, timeout=60))))
    return out


def test_the_twin_answers_every_request_as_the_real_server_does(servers: dict[str, str]) -> None:
    shapes: dict[str, dict[str, Any]] = {}
    for side, url in servers.items():
        with httpx.Client(base_url=url) as client:
            rows = [
                (case, _shape(_answer(client, method, path, form, auth))) for case, method, path, form, auth in CASES
            ]
            rows += _lifecycle(client)
        shapes[side] = dict(rows)
    table = []
    for case in shapes["real"]:
        real, twin = shapes["real"][case], shapes["twin"][case]
        table.append({"case": case, "real": real["status"], "twin": twin["status"], "same": real == twin,
                      **({} if real == twin else {"real_answer": real, "twin_answer": twin})})  # fmt: skip
    (ROOT / ".cache").mkdir(exist_ok=True)
    (ROOT / ".cache" / "real-engine-diff.json").write_text(json.dumps(table, indent=1))
    differ = [row for row in table if not row["same"]]
    assert not differ, json.dumps(differ, indent=1)[:6000]
    # the comparison is not empty: errors of each kind and clips were compared
    assert {row["real"] for row in table} >= {200, 400, 401, 404}
    assert shapes["real"]["sync, 6 frames (rounded to 4k+1)"]["clip"][0] == 9
    assert shapes["real"]["sync, 250x250 (rounded to 16)"]["clip"][1:3] == [240, 240]
