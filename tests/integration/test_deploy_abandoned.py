"""An MCP `deploy` whose client gave up (its timeout sent notifications/cancelled) is torn down, not left
`ready` with an id nobody received (issue 12 item 4). Real twin processes, an in-process MCP session."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest
from mcp import Client

from worldtune.tools.mcp.server import build_server
from worldtune.tools.store import owners
from worldtune.tools.store.database import Store

pytestmark = pytest.mark.integration


def test_a_deploy_whose_client_timed_out_is_torn_down(tmp_path: Path) -> None:
    db = tmp_path / "wt.db"

    async def give_up() -> str:
        async with Client(build_server(str(db))) as client:
            # time scale 1: the twin loads for minutes of wall time, far past the client's 3 s patience
            arguments = {"gpu": "H200", "plan": "cfg2-u4-hsdp8", "time_scale": 1.0}
            with pytest.raises(Exception) as caught:
                await client.call_tool("deploy", arguments, read_timeout_seconds=3.0)
            return repr(caught.value)

    error = anyio.run(give_up)
    assert "timed out" in error.lower() or "timeout" in error.lower(), error
    store = Store(db)
    deadline = time.monotonic() + 120
    # wait for the event: the deployment recorded and stopped (the worker notices at its next step)
    while not (store.list_deployments() and not store.list_deployments(alive_only=True)):
        assert time.monotonic() < deadline, [d.state for d in store.list_deployments()]
        time.sleep(0.05)
    (gone,) = store.list_deployments()
    assert gone.state in ("terminated", "failed")
    assert store.ledger(open_only=True) == [] and len(store.ledger()) == 1
    pids = list(gone.handle.pids)
    assert pids and not any(owners.start_time(pid) for pid in pids)  # no twin process is left
