"""Issue 16 item 5: a tuning run's record is written through MCP tools (record_run, mark_run), so the agent needs
no database of its own and a run against a remote server is recorded there. Real in-process MCP server and client,
real SQLite."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp_cases import ok, refused

from worldtune.tools.mcp.server import build_server
from worldtune.tools.store import owners
from worldtune.tools.store.database import Store
from worldtune.tools.words.goal import Goal

GOAL: dict[str, Any] = Goal(latency_bound_s=150.0, budget_usd=50.0).model_dump(mode="json")


def test_a_run_is_recorded_marked_and_ended_through_the_tools(tmp_path: Path) -> None:
    db = tmp_path / "r.db"

    async def main() -> None:
        async with Client(build_server(str(db))) as client:
            opened = await ok(client, "record_run", {"run_id": "tune-1", "goal": GOAL})
            assert opened["status"] == "running" and opened["kind"] == "tune"
            assert Store(db).owner_alive("tune-1")  # the serving process owns (heartbeats) the running run
            assert (await ok(client, "record_run", {"run_id": "tune-1", "goal": GOAL}))["status"] == "running"
            waiting = {"run_id": "tune-1", "status": "waiting_for_approval", "summary": {"spend_estimate": {"usd": 3}}}
            assert (await ok(client, "mark_run", waiting))["status"] == "waiting_for_approval"
            assert not Store(db).owner_alive("tune-1")  # waiting: nothing runs, its owner lets go
            assert (await ok(client, "mark_run", {"run_id": "tune-1", "status": "running"}))["status"] == "running"
            assert Store(db).owner_alive("tune-1")
            done = {"run_id": "tune-1", "status": "completed", "summary": {"recommendation": {"plan": "tp8"}}}
            ended = await ok(client, "mark_run", done)
            assert ended["status"] == "completed" and ended["finished_at"] is not None

    anyio.run(main)
    row = Store(db).get_run("tune-1")
    assert row is not None and row["goal"] == GOAL and row["summary"] == {"recommendation": {"plan": "tp8"}}
    assert not Store(db).owner_alive("tune-1")
    owners.HEARTBEAT.drop(Store(db).path, "tune-1")


def test_bad_records_are_refused_by_name_and_write_nothing(tmp_path: Path) -> None:
    db = tmp_path / "r.db"

    async def main() -> None:
        async with Client(build_server(str(db))) as client:
            await refused(client, "mark_run", {"run_id": "tune-none", "status": "completed"}, "run_id", "tune-none")
            await refused(client, "record_run", {"run_id": "../etc/passwd", "goal": GOAL}, "run_id", "letters")
            await refused(client, "record_run", {"run_id": "tune-2", "goal": {"latency_bound_s": "soon"}}, "goal")
            await ok(client, "record_run", {"run_id": "tune-2", "goal": GOAL})
            other = {**GOAL, "budget_usd": 999.0}
            await refused(client, "record_run", {"run_id": "tune-2", "goal": other}, "run_id", "new run id")
            await refused(client, "mark_run", {"run_id": "tune-2", "status": "done"}, "status")
            await refused(client, "mark_run", {"run_id": "tune-2", "status": "running", "summary": {"x": 1}},
                          "summary")  # fmt: skip

    anyio.run(main)
    store = Store(db)
    assert [r["id"] for r in store.list_runs()] == ["tune-2"]
    row = store.get_run("tune-2")
    assert row is not None and row["status"] == "running" and row["goal"] == GOAL  # the refusals changed nothing
    owners.HEARTBEAT.drop(store.path, "tune-2")
    store.release_owner("tune-2")
