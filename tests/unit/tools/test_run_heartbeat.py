"""A run belongs to its client (tools/runs/run_heartbeat.py, tools/mcp/client_hooks.py, tools/mcp/heartbeat.py).

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
from worldtune.tools.runs import run_heartbeat
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


def test_a_client_that_missed_its_beats_is_missing_before_its_grace_is_out(tmp_path: Path) -> None:
    """Issue 36.6: 2.5 missed beats (5 s at the default 120 s grace) and the run starts nothing new."""
    assert run_heartbeat.missed_after_s(120) == 5 and run_heartbeat.missed_after_s(2) == 1
    store = Store(tmp_path / "r.db")
    for run_id in ("a", "d", "s"):
        recorded(store, run_id)
    now = time.time()
    run_heartbeat.bind(store, "a", "s1", grace_s=120)
    run_heartbeat.bind(store, "d", "s1", detach=True, hold_hours=1)
    run_heartbeat.bind(store, "s", "s2", grace_s=120)
    assert run_heartbeat.missed_heartbeat(store, "a", now + 3) is None
    assert "no heartbeat from its client for 30" in (run_heartbeat.missed_heartbeat(store, "a", now + 30) or "")
    assert run_heartbeat.missed_heartbeat(store, "d", now + 3000) is None  # detached: meant to go on alone
    run_heartbeat.session_ended(store, "s2")
    assert run_heartbeat.missed_heartbeat(store, "s", now) == "its MCP session ended"
    assert run_heartbeat.missed_heartbeat(store, "unbound", now + 1000) is None  # a local run has no client


def test_a_start_for_a_run_whose_client_is_missing_is_held_then_refused_once_abandoned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On an HTTP server the run's own tools (origin cli) hold deploy while the client is missing; the abandonment
    refuses it and nothing is started. A client that comes back releases the hold (the wait returns)."""
    from worldtune.tools.mcp.client_hooks import _wait_while_missing

    monkeypatch.setitem(run_heartbeat.HOLD, "starts", True)  # as `worldtune mcp --transport http` sets it
    db = tmp_path / "r.db"
    store = Store(db)
    recorded(store, "run-1")
    run_heartbeat.bind(store, "run-1", "s1", grace_s=2)
    with run_heartbeat._db(store) as conn:  # its client has been silent for 1.5 s: past 1 s, within the grace
        conn.execute("UPDATE run_clients SET heartbeat_at = ? WHERE run_id = 'run-1'", (time.time() - 1.5,))
    result: Any = None

    async def main() -> None:
        nonlocal result
        async with Client(build_server(str(db), origin="cli")) as client:

            async def deploy() -> None:
                nonlocal result
                args = {"gpu": "H200", "plan": "tp8", "infra": "local", "engine": "twin", "run_id": "run-1"}
                result = await client.call_tool("deploy", args)

            async with anyio.create_task_group() as group:
                group.start_soon(deploy)
                await anyio.sleep(1.0)
                assert result is None and store.list_deployments() == []  # held, not started
                await anyio.to_thread.run_sync(lambda: run_heartbeat.abandon(store, "run-1", "test: client gone"))

    anyio.run(main)
    said = " ".join(getattr(c, "text", "") for c in result.content)
    assert result.is_error and "abandoned (test: client gone)" in said, said
    assert store.list_deployments() == []
    recorded(store, "run-2")
    run_heartbeat.bind(store, "run-2", "s1", grace_s=2)
    with run_heartbeat._db(store) as conn:
        conn.execute("UPDATE run_clients SET heartbeat_at = ? WHERE run_id = 'run-2'", (time.time() - 1.5,))

    async def back() -> str | None:
        async with anyio.create_task_group() as group:
            group.start_soon(anyio.to_thread.run_sync, lambda: run_heartbeat.beat_from(store, "run-2", "s1"))
        return await _wait_while_missing(store, "run-2")

    assert anyio.run(back) is None
