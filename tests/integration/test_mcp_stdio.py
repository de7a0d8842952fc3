"""The MCP server as an IDE starts it: `worldtune mcp` over stdio, driven by the SDK's own client.

Also runs the deployment and benchmark exercises in-process against a live twin: a benchmark job
started through MCP is polled to completion and its result is the record the database holds.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp_cases import EXPECTED_TOOLS, cleanup, ok, pure_tools, spending_refusals, tuning_round_trip, twin_round_trip

from worldtune.tools.mcp.server import build_server
from worldtune.tools.store.database import Store

pytestmark = pytest.mark.integration

WORLDTUNE = Path(sys.executable).parent / "worldtune"


def stdio_server(db: Path) -> StdioServerParameters:
    # The SDK gives the child a minimal environment; pass what worldtune needs explicitly.
    env = {
        "SKYPILOT_DISABLE_USAGE_COLLECTION": "1",
        "WORLDTUNE_DB": str(db),
        "HOME": os.environ.get("HOME", "/root"),
        "XDG_CACHE_HOME": str(db.parent / "cache"),  # the cached tool listing stays out of ~/.cache
    }
    return StdioServerParameters(command=str(WORLDTUNE), args=["mcp", "--db", str(db)], env=env)


def test_every_tool_over_stdio_with_a_twin_benchmark(tmp_path: Path) -> None:
    db = tmp_path / "results.db"
    store = Store(db)

    async def main() -> None:
        async with Client(stdio_server(db)) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            assert tools >= EXPECTED_TOOLS
            await pure_tools(client)
            await spending_refusals(client, store)
            await twin_round_trip(client, store)
            await tuning_round_trip(client, store, twin_run=True, paid_run=False)  # HTTP covers the approval

    try:
        anyio.run(main)
    finally:
        cleanup(store)
    assert store.list_deployments(alive_only=True) == []


def test_every_tool_in_process_with_a_twin_benchmark(tmp_path: Path) -> None:
    db = tmp_path / "results.db"
    store = Store(db)

    async def main() -> None:
        async with Client(build_server(str(db))) as client:
            await spending_refusals(client, store)
            await twin_round_trip(client, store)  # (the agent's own tests drive tuning in-process)

    try:
        anyio.run(main)
    finally:
        cleanup(store)


def test_stdio_server_refuses_bad_arguments_and_keeps_serving(tmp_path: Path) -> None:
    db = tmp_path / "results.db"

    async def main() -> None:
        async with Client(stdio_server(db)) as client:
            bad = await client.call_tool("estimate", {"plan": "cfg2-u4-hsdp8", "model": "cosmos9"})
            assert bad.is_error and "cosmos9" in bad.content[0].text  # type: ignore[union-attr]
            unknown = await client.call_tool("no_such_tool", {})
            assert unknown.is_error and "no_such_tool" in unknown.content[0].text  # type: ignore[union-attr]
            good = await ok(client, "estimate", {"plan": "cfg2-u4-hsdp8"})
            assert good["valid"]

    anyio.run(main)
