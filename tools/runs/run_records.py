"""A tuning run's record in the results database: opened when the run reads its goal, marked as it waits for
approval, goes on, ends. The agent writes it only through the MCP tools over this (tools/mcp/runs.py), so a run
driven against a remote server (`--mcp-url`) is recorded where its deployments and benchmarks are.

The process that serves the tools owns the run while it is running (it heartbeats it, tools/store/owners.py): for
the in-process server that is the agent's own process, as before; for a remote server, the server.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from worldtune.tools.store.database import Store
from worldtune.tools.words.errors import InvalidInput, describe
from worldtune.tools.words.goal import Goal

RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}")
RunMark = Literal["waiting_for_approval", "running", "completed", "interrupted", "failed"]
MARKS: tuple[str, ...] = ("waiting_for_approval", "running", "completed", "interrupted", "failed")
SUMMARY_LIMIT = 2_000_000  # bytes of JSON: a run's summary with every candidate is ~100 KB


class RunRecord(BaseModel):
    """Where a run's record stands after a write."""

    run_id: str
    kind: str
    status: str = Field(description="running | waiting_for_approval | completed | interrupted | failed")
    created_at: float
    finished_at: float | None = None


def _record(store: Store, run_id: str) -> RunRecord:
    row = store.get_run(run_id)
    if row is None:
        known = [r["id"] for r in store.list_runs(10)]
        hint = f"recent: {', '.join(known)}" if known else "no runs yet: record_run opens one"
        raise InvalidInput("run_id", run_id, f"a run recorded in {store.path}", hint)
    return RunRecord(
        run_id=run_id,
        kind=row["kind"],
        status=row["status"],
        created_at=row["created_at"],
        finished_at=row.get("finished_at"),
    )


def _run_id(run_id: str) -> str:
    if not RUN_ID.fullmatch(run_id):
        raise InvalidInput(
            "run_id",
            run_id,
            "1 to 100 letters, digits, '_', '.', ':' or '-', starting with one "
            "letter or digit, e.g. tune-20261202-081500-a1b2c3",
        )
    return run_id


def record_run(store: Store, run_id: str, goal: dict[str, Any]) -> RunRecord:
    """Open a tuning run's record (running, owned by this process); recording it again changes nothing."""
    _run_id(run_id)
    try:
        checked = Goal.model_validate(goal)  # a record whose goal cannot be read back is refused, not stored
    except ValidationError as exc:
        raise InvalidInput("goal", "(given)", "a goal as the Goal model reads it", describe(exc)) from exc
    row = store.get_run(run_id)
    if row is not None and row.get("goal") != checked.model_dump(mode="json"):
        raise InvalidInput("run_id", run_id, "a new run id, or the goal that run was recorded with")
    store.add_run(run_id, "tune", checked.model_dump(mode="json"))
    return _record(store, run_id)


def mark_run(store: Store, run_id: str, status: str, summary: dict[str, Any] | None = None) -> RunRecord:
    """Mark where a recorded run stands: running again (this process owns it from now on), or waiting /
    ended with its summary (its owner lets go, so what it left is garbage for `worldtune gc`)."""
    _run_id(run_id)
    if status not in MARKS:
        raise InvalidInput("status", status, " | ".join(MARKS))
    _record(store, run_id)  # an unknown run is refused before anything is written
    if status == "running":
        if summary:
            raise InvalidInput("summary", "(given)", "no summary with status running: a run in progress has none")
        store.restart_run(run_id)
        return _record(store, run_id)
    size = len(json.dumps(summary or {}, default=str))
    if size > SUMMARY_LIMIT:
        raise InvalidInput("summary", f"{size} bytes of JSON", f"at most {SUMMARY_LIMIT} bytes")
    store.finish_run(run_id, status, summary or {})
    return _record(store, run_id)


def record_fleet(store: Store, run_id: str, fleet: dict[str, Any]) -> RunRecord:
    """Put the run's fleet (what the fleet step planned and rehearsed) into its summary, under 'fleet'."""
    _run_id(run_id)
    _record(store, run_id)  # an unknown run is refused before anything is written
    size = len(json.dumps(fleet, default=str))
    if size > SUMMARY_LIMIT:
        raise InvalidInput("fleet", f"{size} bytes of JSON", f"at most {SUMMARY_LIMIT} bytes")
    store.add_to_summary(run_id, "fleet", fleet)
    return _record(store, run_id)
