"""Tuning jobs: a run started, followed and resumed for the MCP server's start_tuning, get_tuning, approve_tuning.

The capability keeps the run's record in the results database (opened before the run starts, so get_tuning
finds it at once; failed when the run dies of an error; read back for its status) and asks the Tuner it is
given (tools/words/tuning.py; the agent's AgentTuner) to prepare and run it. The run's own graph writes the rest of
its record through the MCP tools record_run and mark_run (tools/runs/run_records.py).

Ownership (tools/store/owners.py): the process that records a run owns and heartbeats it while a thread of it
drives the run; a detached run's own process takes it over, so this one lets go of it at once.
"""

from __future__ import annotations

from typing import Any

from worldtune.tools.store import owners
from worldtune.tools.store.database import Store
from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.tuning import Failed, Tuner, TuningRequest


def failure_recorder(store: Store, run_id: str) -> Failed:
    """What a run driven in this process calls when an error ends it: the run is recorded failed."""

    def failed(error: str) -> None:
        store.finish_run(run_id, "failed", {"error": error})

    return failed


def start_tuning(store: Store, tuner: Tuner, goal: str, request: TuningRequest) -> str:
    """Prepare the run (an ambiguous goal or a bad request raises before anything is recorded), record it as
    running, then start it; returns its run id at once."""
    job = tuner.prepare(goal, request)
    store.add_run(job.run_id, "tune", job.goal, detach=request.detach)
    if request.detach:  # the run's own process opens the database at the same path, whatever its environment
        request = request.model_copy(update={"db_path": str(store.path)})
    try:
        tuner.launch(job, request, failure_recorder(store, job.run_id))
    except Exception as exc:  # it never started: say so where get_tuning reads it
        store.finish_run(job.run_id, "failed", {"error": f"{type(exc).__name__}: {exc}"})
        raise
    if request.detach:
        owners.HEARTBEAT.drop(store.path, job.run_id)  # the spawned process owns and heartbeats it now
    return job.run_id


def tuning_status(store: Store, tuner: Tuner, run_id: str) -> dict[str, Any]:
    """Where a run stands (TuningStatus's fields): its record, corrected by whether a thread of this process
    drives it or its owner is gone, with what its checkpoint holds, and its summary once completed."""
    row = store.get_run(run_id)
    if row is None:
        known = [r["id"] for r in store.list_runs(10) if r["kind"] == "tune"]
        raise InvalidInput("run_id", run_id, "the id start_tuning returned", f"recent: {', '.join(known) or 'none'}")
    seen = dict(tuner.progress(run_id, str(store.path)))
    alive, error = bool(seen.pop("alive", False)), seen.pop("error", None)
    status = str(row["status"])
    if alive:
        status = "running"
    elif status == "running" and not store.owner_alive(run_id):
        status = "interrupted"  # its process is gone: gc tears down what it left, resume continues it
    out: dict[str, Any] = {"run_id": run_id, "status": status, "error": error, **seen}
    if isinstance(row.get("summary"), dict) and status == "completed":
        out["summary"] = row["summary"]
    return out


def resume_tuning(store: Store, tuner: Tuner, run_id: str, approve: bool, db_path: str | None) -> None:
    """Answer a run's approval question through its Tuner; an error that ends the resumed run is recorded."""
    tuner.resume(run_id, approve, db_path, failure_recorder(store, run_id))
