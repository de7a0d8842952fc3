"""`worldtune mcp --transport http` against a hostile client: deep JSON is answered, server files cannot be named.

The server binds loopback on a free port; the test waits for its "worldtune MCP on" line and its port,
then speaks JSON-RPC over HTTP directly, as any client could.
"""

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
from typing import Any

import httpx
import pytest

from worldtune.tools.backends.local import free_port

pytestmark = pytest.mark.integration

WORLDTUNE = Path(sys.executable).parent / "worldtune"
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
CLIENT = {"name": "t", "version": "0"}
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": CLIENT}}  # fmt: skip
SECRET = "SECRET-MARKER-http-91ab"


@contextmanager
def server(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    env = {**os.environ, "SKYPILOT_DISABLE_USAGE_COLLECTION": "1", "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "WORLDTUNE_PROFILE_DIR": str(tmp_path / "profiles"), "COLUMNS": "200"}  # fmt: skip
    cmd = [str(WORLDTUNE), "mcp", "--transport", "http", "--port", str(port), "--db", str(tmp_path / "wt.db")]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # blocks until the server has built its app (or exits: the loop ends)
            if "worldtune MCP on" in line:
                break
        # the line comes just before uvicorn binds: wait for the port itself (bounded, the process checked)
        for _ in range(6000):
            assert proc.poll() is None, "the server exited before listening"
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def session(url: str) -> dict[str, str]:
    answer = httpx.post(url, json=INIT, headers=HEADERS, timeout=60)
    assert answer.status_code == 200, answer.text
    headers = {**HEADERS, "mcp-session-id": answer.headers["mcp-session-id"]}
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    httpx.post(url, json=note, headers=headers, timeout=60)
    return headers


def rpc_result(answer: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC message of an answer sent as JSON or as one server-sent event."""
    if answer.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in answer.text.splitlines() if line.startswith("data:")]
        return dict(json.loads(data[-1]))
    return dict(answer.json())


def test_deeply_nested_json_gets_an_error_answer(tmp_path: Path) -> None:
    with server(tmp_path) as url:
        headers = session(url)
        for opening, closing in (("[", "]"), ('{"a": ', "}")):
            nested = opening * 5000 + "1" + closing * 5000
            body = ('{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "estimate", '
                    '"arguments": {"plan": ' + nested + "}}}")  # fmt: skip
            answer = httpx.post(url, content=body, headers=headers, timeout=120)
            assert answer.status_code == 400, answer.text
            assert rpc_result(answer)["error"]["code"] == -32700  # a parse error, answered


def test_remote_clients_name_profiles_only_and_never_read_server_files(tmp_path: Path) -> None:
    planted = tmp_path / "token.yaml"
    planted.write_text(f"token: {SECRET}\n")
    with server(tmp_path) as url:
        headers = session(url)
        texts = []
        for seq, profile in enumerate((str(planted), "/etc/passwd", "/proc/self/environ", "H200")):
            call = {"jsonrpc": "2.0", "id": 10 + seq, "method": "tools/call",
                    "params": {"name": "estimate", "arguments": {"plan": "tp8", "profile": profile}}}  # fmt: skip
            message = rpc_result(httpx.post(url, json=call, headers=headers, timeout=120))
            texts.append((profile, message["result"]))
    for profile, result in texts:
        text = json.dumps(result)
        assert SECRET not in text and "root:" not in text, text
        if profile == "H200":
            assert not result.get("isError"), text
        else:
            assert result.get("isError") and "profile=" in text and "is not valid" in text, text
