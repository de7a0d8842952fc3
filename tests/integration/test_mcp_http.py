"""`worldtune mcp --transport http`: streamable HTTP with a bearer token off loopback, 401 without it.

The server binds 0.0.0.0 (every interface, so a token is required) and the client connects through
127.0.0.1: only loopback traffic, as everywhere in these tests.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_cases import EXPECTED_TOOLS, cleanup, ok, pure_tools, spending_refusals, tuning_round_trip, twin_round_trip

from worldtune.tools.backends.local import free_port
from worldtune.tools.store.database import Store

pytestmark = pytest.mark.integration

WORLDTUNE = Path(sys.executable).parent / "worldtune"
TOKEN = "test-token-7f3a"
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaves(inner)]
    return [exc, *([exc.__cause__] if exc.__cause__ else [])]


@contextmanager
def mcp_http(db: Path, *args: str, token_env: str | None = None) -> Iterator[str]:
    """Run `worldtune mcp --transport http ARGS` until the block ends; yield its loopback URL."""
    port = free_port()
    env = {**os.environ, "SKYPILOT_DISABLE_USAGE_COLLECTION": "1", "XDG_CACHE_HOME": str(db.parent / "cache")}
    env.pop("WORLDTUNE_MCP_TOKEN", None)
    if token_env:
        env["WORLDTUNE_MCP_TOKEN"] = token_env
    cmd = [str(WORLDTUNE), "mcp", "--transport", "http", "--port", str(port), "--db", str(db), *args]
    # Its output goes to a file, never an unread pipe: a long run's logging would fill the pipe and block the server.
    log_path = db.parent / f"mcp-http-{port}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120  # generous: CI is a loaded 2-core box
        while True:
            assert proc.poll() is None, f"server exited: {log_path.read_text(errors='replace')[-3000:]}"
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.monotonic() < deadline, "server did not start listening"
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_non_loopback_bind_without_token_is_refused(tmp_path: Path) -> None:
    env = {**os.environ}
    env.pop("WORLDTUNE_MCP_TOKEN", None)
    cmd = [str(WORLDTUNE), "mcp", "--transport", "http", "--host", "0.0.0.0", "--port", str(free_port())]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "host='0.0.0.0' is not valid" in done.stderr and "--token" in done.stderr


def test_token_server_on_all_interfaces_answers_401_without_the_token(tmp_path: Path) -> None:
    db = tmp_path / "results.db"
    store = Store(db)
    with mcp_http(db, "--host", "0.0.0.0", token_env=TOKEN) as url:  # the token from $WORLDTUNE_MCP_TOKEN
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}):
            answer = httpx.post(url, json=INIT, headers={**HEADERS, **headers}, timeout=30)
            assert answer.status_code == 401, (headers, answer.status_code, answer.text)
            # RFC 6750: no error code when no credentials were sent; invalid_token when wrong ones were
            assert ("invalid_token" in answer.headers.get("www-authenticate", "")) == bool(headers), headers
        assert httpx.post(url, json=INIT, headers={**HEADERS, "Authorization": f"Bearer {TOKEN}"}).status_code == 200

        async def without_token() -> None:
            async with Client(url) as client:
                await client.list_tools()

        with pytest.raises(BaseException) as refused_client:
            anyio.run(without_token)
        # the SDK's client reports a non-2xx answer as an MCPError (the 401 itself is checked above)
        assert any(isinstance(e, MCPError) for e in leaves(refused_client.value))

        async def with_token() -> None:
            http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=httpx2.Timeout(60.0))
            async with http, Client(streamable_http_client(url, http_client=http)) as client:
                tools = {t.name for t in (await client.list_tools()).tools}
                assert tools >= EXPECTED_TOOLS
                await pure_tools(client)
                await spending_refusals(client, store)
                await twin_round_trip(client, store)
                await tuning_round_trip(client, store, twin_run=False, paid_run=True)  # stdio runs one to the end

        try:
            anyio.run(with_token)
        finally:
            cleanup(store)


def test_loopback_server_needs_no_token_and_checks_the_host_header(tmp_path: Path) -> None:
    with mcp_http(tmp_path / "results.db") as url:

        async def main() -> None:
            async with Client(url) as client:
                got = await ok(client, "estimate", {"plan": "8x1gpu", "gpu": "H200"})
                assert got["valid"] and got["replicas"] == 8

        anyio.run(main)
        # DNS-rebinding protection: a page on another origin cannot drive the local server
        rebound = httpx.post(url, json=INIT, headers={**HEADERS, "Host": "evil.example:80"}, timeout=30)
        assert rebound.status_code in (400, 403, 421), rebound.status_code
        foreign = httpx.post(url, json=INIT, headers={**HEADERS, "Origin": "http://evil.example"}, timeout=30)
        assert foreign.status_code in (400, 403), foreign.status_code


def test_token_flag_protects_a_loopback_server_too(tmp_path: Path) -> None:
    with mcp_http(tmp_path / "results.db", "--token", TOKEN) as url:
        assert httpx.post(url, json=INIT, headers=HEADERS, timeout=30).status_code == 401
        authorized = {**HEADERS, "Authorization": f"Bearer {TOKEN}"}
        assert httpx.post(url, json=INIT, headers=authorized, timeout=30).status_code == 200
