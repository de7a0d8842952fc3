"""A run belongs to its client (tools/results/run_heartbeat.py, tools/mcp/client_hooks.py, tools/mcp/heartbeat.py).

In-process: the SDK's client against build_server, the results database in tmp_path, no process started (the
deployments are recorded local ones with no process behind them, so their teardown only settles the record).
The HTTP client killed with SIGKILL is tests/integration/test_run_abandon.py.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp_cases import ok, refused

from worldtune.tools.mcp.server import build_server
from worldtune.tools.results import run_heartbeat
from worldtune.tools.store.database import Store
from worldtune.tools.words.deployment import Deployment
from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.goal import Goal


def recorded(store: Store, run_id: str) -> None:
    store.add_run(run_id, "tune", Goal().model_dump(mode="json"))


def test_due_after_the_grace_or_the_session_end_never_when_detached(tmp_path: Path) -> None:
    store = Store(tmp_path / "r.db")
    for run_id in ("a", "b", "d", "h", "w"):
        recorded(store, run_id)
    now = time.time()
    run_heartbeat.bind(store, "a", "s1", grace_s=5)
    run_heartbeat.bind(store, "b", "s2", grace_s=500)
    run_heartbeat.bind(store, "d", "s1", detach=True)  # no hold_hours: outlives its client for good
    run_heartbeat.bind(store, "h", "s1", detach=True, hold_hours=1)
    run_heartbeat.bind(store, "w", "s1", grace_s=5)
    store.finish_run("w", "waiting_for_approval", {})  # holds nothing while it waits
    assert run_heartbeat.due(store, now + 1) == []
    assert [r for r, _ in run_heartbeat.due(store, now + 10)] == ["a"]
    assert "no heartbeat from its client" in run_heartbeat.due(store, now + 10)[0][1]
    assert sorted(r for r, _ in run_heartbeat.due(store, now + 3700)) == ["a", "b", "h"]
    assert run_heartbeat.session_ended(store, "s2") == ["b"] and run_heartbeat.WAKE.is_set()
    assert ("b", "its MCP session ended") in run_heartbeat.due(store, now + 1)
    with pytest.raises(InvalidInput, match="hold_hours"):
        run_heartbeat.bind(store, "x", "s1", hold_hours=2)
    with pytest.raises(InvalidInput, match="grace_s"):
        run_heartbeat.bind(store, "x", "s1", grace_s=float("inf"))


def test_abandon_stops_the_driver_tears_down_marks_abandoned_and_keeps_the_record(tmp_path: Path) -> None:
    store = Store(tmp_path / "r.db")
    recorded(store, "run-1")
    store.save_deployment(Deployment(id="wt-1", gpu="H200", plan="tp8", infra="local", engine="twin",
                                     state="ready", run_id="run-1"))  # fmt: skip
    store.add_to_summary("run-1", "kept", 1)
    run_heartbeat.bind(store, "run-1", "s1", grace_s=1)
    asked: list[tuple[str, str]] = []

    def stopper(run_id: str, reason: str) -> bool:
        asked.append((run_id, reason))
        return True

    done = run_heartbeat.sweep(store, stopper, now=time.time() + 5)
    assert [d["run_id"] for d in done] == ["run-1"] and done[0]["driver_stopped"]
    assert asked and asked[0][0] == "run-1" and asked[0][1].startswith("abandoned: no heartbeat")
    assert store.list_deployments(run_id="run-1", alive_only=True) == []
    run = store.get_run("run-1")
    assert run is not None and run["status"] == "abandoned" and run["summary"]["kept"] == 1
    assert "no heartbeat" in run["summary"]["abandoned"]
    assert run_heartbeat.abandoned_reason(store, "run-1") is not None
    assert run_heartbeat.sweep(store, stopper, now=time.time() + 5) == []  # once
    with pytest.raises(InvalidInput, match="abandoned"):
        run_heartbeat.bind(store, "run-1", "s1")


def with_client(db: Path, origin: str, body: Any) -> None:
    async def main() -> None:
        async with Client(build_server(str(db), origin=origin)) as client:
            await body(client)

    anyio.run(main)


def test_calls_carrying_the_run_id_heartbeat_and_an_abandoned_run_starts_nothing(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    store = Store(db)
    recorded(store, "run-2")

    async def body(client: Client) -> None:
        bound = await ok(client, "heartbeat_run", {"run_id": "run-2", "grace_s": 30})
        assert bound["grace_s"] == 30 and not bound["detach"] and bound["abandoned"] is None
        before = store_row()["heartbeat_at"]
        await ok(client, "list_deployments", {"run_id": "run-2"})  # any call with the run's id is a heartbeat
        assert store_row()["heartbeat_at"] > before
        detached = await ok(client, "heartbeat_run", {"run_id": "run-2", "detach": True, "hold_hours": 2})
        assert detached["detach"] and detached["grace_s"] == 7200
        again = await ok(client, "heartbeat_run", {"run_id": "run-2"})  # unset detach keeps the terms
        assert again["detach"] and again["hold_hours"] == 2
        run_heartbeat.abandon(store, "run-2", "test: client gone")
        await refused(client, "deploy", {"gpu": "H200", "plan": "tp8", "run_id": "run-2"}, "abandoned")
        await refused(client, "heartbeat_run", {"run_id": "run-2"}, "test: client gone")
        await ok(client, "list_deployments", {"run_id": "run-2"})  # reading is still fine

    def store_row() -> dict[str, Any]:
        row = run_heartbeat.get(store, "run-2")
        assert row is not None
        return row

    with_client(db, "mcp-local", body)


def test_a_runs_own_in_process_tools_never_keep_it_alive(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    store = Store(db)
    recorded(store, "run-3")
    run_heartbeat.bind(store, "run-3", "client", grace_s=30)
    before = (run_heartbeat.get(store, "run-3") or {})["heartbeat_at"]

    async def body(client: Client) -> None:
        await ok(client, "list_deployments", {"run_id": "run-3"})

    with_client(db, "cli", body)  # the agent's own server (tools_client.connect without a URL)
    assert (run_heartbeat.get(store, "run-3") or {})["heartbeat_at"] == before
