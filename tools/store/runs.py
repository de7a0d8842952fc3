"""Runs and their owners: what a run is, how it ended, and whose heartbeat keeps what it made alive.

Every run, deployment and ledger row has an owner (a run, or the process that made it outside any run)
whose heartbeat is in `owners` (tools/store/owners.py): an owner released, stale or whose process is gone is
dead, and `gc` treats what it left behind as garbage.
"""

from __future__ import annotations

import json
import time
from typing import Any

from worldtune.tools.store import owners
from worldtune.tools.store.schema import Database, decode_row


class RunRecords(Database):
    """The `runs` and `owners` tables."""

    # ---- runs --------------------------------------------------------------------------------------
    def add_run(self, run_id: str, kind: str, goal: dict[str, Any] | None = None, detach: bool = False) -> None:
        """Record a run as running, owned (and heartbeated) by this process."""
        with self._connect() as db:
            db.execute(
                "INSERT OR IGNORE INTO runs (id, kind, status, goal, created_at) VALUES (?, ?, 'running', ?, ?)",
                (run_id, kind, json.dumps(goal) if goal is not None else None, time.time()),
            )
        self.claim_owner(run_id, kind, detach=detach)

    def restart_run(self, run_id: str) -> None:
        """A resumed run is running again, owned by the process that resumes it."""
        with self._connect() as db:
            db.execute("UPDATE runs SET status = 'running', finished_at = NULL WHERE id = ?", (run_id,))
        self.claim_owner(run_id, "tune")

    def finish_run(self, run_id: str, status: str, summary: dict[str, Any]) -> None:
        """Record how a run ended; its owner lets go, so whatever it left is garbage from now on."""
        with self._connect() as db:
            db.execute(
                "UPDATE runs SET status = ?, summary = ?, finished_at = ? WHERE id = ?",
                (status, json.dumps(summary, default=str), time.time(), run_id),
            )
        self.release_owner(run_id)

    def add_to_summary(self, run_id: str, key: str, value: Any) -> None:
        """Put one more entry in a finished run's summary (what was done after the run, e.g. its fleet)."""
        with self._connect() as db:
            row = db.execute("SELECT summary FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None:
                return
            summary = json.loads(row[0]) if row[0] else {}
            summary[key] = value
            db.execute("UPDATE runs SET summary = ? WHERE id = ?", (json.dumps(summary, default=str), run_id))

    def get_run(self, run_id: str) -> dict[str, Any] | None:
        with self._connect() as db:
            row = db.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        return decode_row(row, ("goal", "summary")) if row else None

    def list_runs(self, limit: int = 50) -> list[dict[str, Any]]:
        with self._connect() as db:
            rows = db.execute("SELECT * FROM runs ORDER BY created_at DESC LIMIT ?", (limit,)).fetchall()
        return [decode_row(r, ("goal", "summary")) for r in rows]

    # ---- owners and their heartbeats ---------------------------------------------------------------
    def claim_owner(self, owner_id: str, kind: str, detach: bool | None = None) -> None:
        """This process owns `owner_id` from now on (a resume takes over a dead owner's run) and heartbeats it."""
        name, pid, started = owners.this_process()
        now = time.time()
        with self._connect() as db:
            db.execute(
                "INSERT INTO owners (id, kind, host, pid, pid_start, created_at, heartbeat_at, detach) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET host = excluded.host, "
                "pid = excluded.pid, pid_start = excluded.pid_start, heartbeat_at = excluded.heartbeat_at, "
                "released_at = NULL, detach = COALESCE(?, owners.detach)",
                (owner_id, kind, name, pid, started, now, now, int(bool(detach)), None if detach is None else detach),
            )
        owners.HEARTBEAT.hold(self.path, owner_id)

    def release_owner(self, owner_id: str) -> None:
        """The owner is done on purpose: it stops heartbeating and counts as gone."""
        owners.HEARTBEAT.drop(self.path, owner_id)
        with self._connect() as db:
            db.execute(
                "UPDATE owners SET released_at = ? WHERE id = ? AND released_at IS NULL", (time.time(), owner_id)
            )

    def get_owner(self, owner_id: str) -> dict[str, Any] | None:
        with self._connect() as db:
            row = db.execute("SELECT * FROM owners WHERE id = ?", (owner_id,)).fetchone()
        return dict(row) if row else None

    def owner_alive(self, owner_id: str | None) -> bool:
        """Alive: not released, its heartbeat fresh, and (on this host) its very process still running.

        An owner never recorded (a database from before owners existed) has no heartbeat: it is dead.
        """
        row = self.get_owner(owner_id) if owner_id else None
        if row is None or row["released_at"] is not None:
            return False
        if time.time() - float(row["heartbeat_at"]) > owners.STALE_S:
            return False
        return row["host"] != owners.host() or owners.process_alive(int(row["pid"]), int(row["pid_start"]) or None)

    def process_owner(self) -> str:
        """The owner id of this process (claimed on first use) for what it starts outside any run."""
        owner_id = owners.process_owner_id()
        if (str(self.path), owner_id) not in owners.HEARTBEAT.held():
            self.claim_owner(owner_id, "process")
        return owner_id

    def owner_of_deployment(self, deployment_id: str) -> str | None:
        with self._connect() as db:
            row = db.execute("SELECT owner_id, run_id FROM deployments WHERE id = ?", (deployment_id,)).fetchone()
        return (row["owner_id"] or row["run_id"]) if row else None
