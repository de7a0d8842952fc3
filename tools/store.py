"""The results database: runs, deployments, benchmarks, every sample, and the cluster ledger (SQLite, WAL).

Each write commits at once, so a crash or a kill loses nothing already measured. Every process
opens its own short-lived connections; WAL lets readers (the CLI, the MCP server) look while a
benchmark writes. Every run, deployment and ledger row has an owner (a run, or the process that made
it) whose heartbeat is in `owners` (tools/owners.py), so `gc` can tell what a dead owner left behind.
Columns added since the first schema are added to older databases when they are opened.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from worldtune.tools import owners
from worldtune.tools.deployment import ALIVE_STATES, Deployment

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY, kind TEXT NOT NULL, status TEXT NOT NULL, goal TEXT,
    created_at REAL NOT NULL, finished_at REAL, summary TEXT
);
CREATE TABLE IF NOT EXISTS deployments (
    id TEXT PRIMARY KEY, run_id TEXT, state TEXT NOT NULL, infra TEXT NOT NULL,
    created_at REAL NOT NULL, updated_at REAL NOT NULL, body TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS benchmarks (
    id TEXT PRIMARY KEY, run_id TEXT, deployment_id TEXT, status TEXT NOT NULL,
    progress REAL NOT NULL DEFAULT 0, message TEXT NOT NULL DEFAULT '', config TEXT NOT NULL,
    started_at REAL NOT NULL, finished_at REAL, result TEXT, error TEXT
);
CREATE TABLE IF NOT EXISTS samples (
    id INTEGER PRIMARY KEY AUTOINCREMENT, benchmark_id TEXT NOT NULL, seq INTEGER NOT NULL,
    phase TEXT NOT NULL, steps INTEGER NOT NULL, concurrency INTEGER NOT NULL, endpoint TEXT NOT NULL,
    sent_at REAL NOT NULL, latency_s REAL, server_time_s REAL, ok INTEGER NOT NULL,
    error_kind TEXT, status_code INTEGER, body TEXT NOT NULL,
    UNIQUE (benchmark_id, seq)
);
CREATE INDEX IF NOT EXISTS samples_by_benchmark ON samples (benchmark_id, seq);
CREATE TABLE IF NOT EXISTS benchmark_locks (
    target TEXT PRIMARY KEY, benchmark_id TEXT NOT NULL, acquired_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS ledger (
    cluster TEXT PRIMARY KEY, backend TEXT NOT NULL, deployment_id TEXT, run_id TEXT,
    launched_at REAL NOT NULL, gone_at REAL, state TEXT NOT NULL, detail TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS owners (
    id TEXT PRIMARY KEY, kind TEXT NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL, pid_start INTEGER NOT NULL,
    created_at REAL NOT NULL, heartbeat_at REAL NOT NULL, released_at REAL, detach INTEGER NOT NULL DEFAULT 0
);
"""
# Columns newer than a table's first version: (table, column, declaration), added to older databases on open.
ADDED_COLUMNS = (("deployments", "owner_id", "TEXT"), ("ledger", "owner_id", "TEXT"))


def default_db_path() -> Path:
    """$WORLDTUNE_DB, else $XDG_DATA_HOME/worldtune/worldtune.db (~/.local/share/... by default)."""
    override = os.environ.get("WORLDTUNE_DB")
    if override:
        return Path(override)
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "worldtune" / "worldtune.db"


class Store:
    """A handle on one results database file."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path else default_db_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(SCHEMA)
            for table, column, declaration in ADDED_COLUMNS:
                present = {r["name"] for r in db.execute(f"PRAGMA table_info({table})")}
                if column not in present:
                    try:
                        db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
                    except sqlite3.OperationalError as exc:  # another process added it a moment ago
                        if "duplicate column" not in str(exc):
                            raise

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=30)
        db.row_factory = sqlite3.Row
        try:
            with db:  # commits on success, rolls back on error
                yield db
        finally:
            db.close()

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

    def get_run(self, run_id: str) -> dict[str, Any] | None:
        with self._connect() as db:
            row = db.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        return _decode(row, ("goal", "summary")) if row else None

    def list_runs(self, limit: int = 50) -> list[dict[str, Any]]:
        with self._connect() as db:
            rows = db.execute("SELECT * FROM runs ORDER BY created_at DESC LIMIT ?", (limit,)).fetchall()
        return [_decode(r, ("goal", "summary")) for r in rows]

    # ---- deployments -------------------------------------------------------------------------------
    def save_deployment(self, deployment: Deployment, if_alive: bool = False) -> None:
        """Insert or update; the first save records the owner: its run, else the process that saves it.

        A terminated deployment never comes back alive: a save that would move it to a live state (a status
        check that read it before a concurrent teardown, e.g. gc or the lease sweep) is dropped. It may still be
        recorded failed (a start that failed is torn down first, then recorded failed with its reason).
        if_alive: update only a deployment still recorded alive (what a status check writes: compare and set)."""
        now = time.time()
        alive = ", ".join(f"'{state}'" for state in ALIVE_STATES)
        guard = (
            f"deployments.state IN ({alive})"
            if if_alive
            else "deployments.state != 'terminated' OR excluded.state IN ('terminated', 'failed')"
        )
        owner = deployment.run_id or (None if self.owner_of_deployment(deployment.id) else self.process_owner())
        with self._connect() as db:
            db.execute(
                "INSERT INTO deployments (id, run_id, state, infra, created_at, updated_at, body, owner_id) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET state = excluded.state, "
                "updated_at = excluded.updated_at, body = excluded.body, run_id = excluded.run_id, "
                "owner_id = COALESCE(excluded.owner_id, deployments.owner_id) WHERE " + guard,
                (
                    deployment.id,
                    deployment.run_id,
                    deployment.state,
                    deployment.infra,
                    deployment.created_at,
                    now,
                    deployment.model_dump_json(),
                    owner,
                ),
            )

    def reserve_deployment(self, deployment: Deployment, check: Callable[[list[Deployment]], None]) -> None:
        """Save a new deployment only if `check(every stored deployment)` does not raise, atomically.

        BEGIN IMMEDIATE holds the database's write lock from the read to the insert, so two callers
        (threads, processes) cannot both pass a guardrail that only one of them fits under.
        """
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            db.execute("BEGIN IMMEDIATE")
            rows = db.execute("SELECT body FROM deployments ORDER BY created_at").fetchall()
            check([Deployment.model_validate_json(r[0]) for r in rows])
            now = time.time()
            db.execute(
                "INSERT INTO deployments (id, run_id, state, infra, created_at, updated_at, body) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (deployment.id, deployment.run_id, deployment.state, deployment.infra, deployment.created_at, now,
                 deployment.model_dump_json()),
            )  # fmt: skip
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        finally:
            db.close()

    def get_deployment(self, deployment_id: str) -> Deployment | None:
        with self._connect() as db:
            row = db.execute("SELECT body FROM deployments WHERE id = ?", (deployment_id,)).fetchone()
        return Deployment.model_validate_json(row["body"]) if row else None

    def list_deployments(self, run_id: str | None = None, alive_only: bool = False) -> list[Deployment]:
        query, args = "SELECT body FROM deployments", []
        if run_id:
            query += " WHERE run_id = ?"
            args.append(run_id)
        with self._connect() as db:
            rows = db.execute(query + " ORDER BY created_at", args).fetchall()
        found = [Deployment.model_validate_json(r["body"]) for r in rows]
        return [d for d in found if d.alive] if alive_only else found

    # ---- benchmarks and samples ---------------------------------------------------------------------
    def create_benchmark(
        self, benchmark_id: str, config: dict[str, Any], deployment_id: str | None = None, run_id: str | None = None
    ) -> None:
        with self._connect() as db:
            db.execute(
                "INSERT OR IGNORE INTO benchmarks (id, run_id, deployment_id, status, config, started_at) "
                "VALUES (?, ?, ?, 'running', ?, ?)",
                (benchmark_id, run_id, deployment_id, json.dumps(config, default=str), time.time()),
            )

    def update_benchmark(
        self,
        benchmark_id: str,
        *,
        status: str | None = None,
        progress: float | None = None,
        message: str | None = None,
        result: dict[str, Any] | None = None,
        error: str | None = None,
    ) -> None:
        sets, args = [], []
        for column, value in (("status", status), ("progress", progress), ("message", message), ("error", error)):
            if value is not None:
                sets.append(f"{column} = ?")
                args.append(value)
        if result is not None:
            sets.append("result = ?")
            args.append(json.dumps(result, default=str))
        if status in ("completed", "failed", "cancelled"):
            sets.append("finished_at = ?")
            args.append(time.time())
        if not sets:
            return
        with self._connect() as db:
            db.execute(f"UPDATE benchmarks SET {', '.join(sets)} WHERE id = ?", (*args, benchmark_id))

    def get_benchmark(self, benchmark_id: str) -> dict[str, Any] | None:
        with self._connect() as db:
            row = db.execute("SELECT * FROM benchmarks WHERE id = ?", (benchmark_id,)).fetchone()
        return self._settled(_decode(row, ("config", "result"))) if row else None

    def _settled(self, row: dict[str, Any]) -> dict[str, Any]:
        """A 'running' benchmark whose process (on this host) is gone has failed: say so in the row itself,
        so `results list`, `results show`, get_benchmark and the agent all read one status."""
        config = row.get("config") or {}
        pid = config.get("pid")
        if row["status"] != "running" or not isinstance(pid, int) or config.get("host") != owners.host():
            return row
        if owners.process_alive(pid, config.get("pid_start")):
            return row
        with self._connect() as db:
            done = db.execute("SELECT count(*) FROM samples WHERE benchmark_id = ?", (row["id"],)).fetchone()[0]
            message = f"the benchmark process ({pid}) is gone; result from {done} samples"
            # only a row still 'running': one its process finished just before it went stays as it ended
            db.execute(
                "UPDATE benchmarks SET status = 'failed', message = ?, error = COALESCE(error, ?), finished_at = ? "
                "WHERE id = ? AND status = 'running'",
                (message, f"process {pid} ended before the benchmark did", time.time(), row["id"]),
            )
            fresh = db.execute("SELECT * FROM benchmarks WHERE id = ?", (row["id"],)).fetchone()
        return _decode(fresh, ("config", "result"))

    def list_benchmarks(self, run_id: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        query, args = "SELECT * FROM benchmarks", []
        if run_id:
            query += " WHERE run_id = ?"
            args.append(run_id)
        with self._connect() as db:
            rows = db.execute(query + " ORDER BY started_at DESC LIMIT ?", (*args, limit)).fetchall()
        return [self._settled(_decode(r, ("config", "result"))) for r in rows]

    def add_sample(self, benchmark_id: str, seq: int, sample: dict[str, Any]) -> None:
        """Write one measured request at once (idempotent on (benchmark, seq))."""
        with self._connect() as db:
            db.execute(
                "INSERT OR REPLACE INTO samples (benchmark_id, seq, phase, steps, concurrency, endpoint, sent_at, "
                "latency_s, server_time_s, ok, error_kind, status_code, body) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    benchmark_id,
                    seq,
                    sample.get("phase", "full"),
                    int(sample.get("steps", 0)),
                    int(sample.get("concurrency", 1)),
                    str(sample.get("endpoint", "")),
                    float(sample.get("sent_at", time.time())),
                    sample.get("latency_s"),
                    sample.get("server_time_s"),
                    1 if sample.get("ok") else 0,
                    sample.get("error_kind"),
                    sample.get("status_code"),
                    json.dumps(sample, default=str),
                ),
            )

    def samples(self, benchmark_id: str) -> list[dict[str, Any]]:
        with self._connect() as db:
            rows = db.execute(
                "SELECT body FROM samples WHERE benchmark_id = ? ORDER BY seq", (benchmark_id,)
            ).fetchall()
        return [json.loads(r["body"]) for r in rows]

    # ---- one benchmark per deployment ----------------------------------------------------------------
    def lock_holder(self, target: str) -> dict[str, Any] | None:
        """The benchmark holding `target` (a deployment or an endpoint set), if any."""
        with self._connect() as db:
            row = db.execute("SELECT * FROM benchmark_locks WHERE target = ?", (target,)).fetchone()
        return dict(row) if row else None

    def take_lock(self, target: str, benchmark_id: str, replacing: str | None = None) -> str | None:
        """Hold `target` for `benchmark_id` unless another benchmark holds it; returns that holder, or None.

        `replacing`: a holder the caller found stale (finished, or its process gone): taken over only if it
        is still the one holding, so two callers that both judged it stale cannot both get the lock.
        """
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            db.execute("BEGIN IMMEDIATE")
            row = db.execute("SELECT benchmark_id FROM benchmark_locks WHERE target = ?", (target,)).fetchone()
            holder = row[0] if row else None
            if holder not in (None, benchmark_id, replacing):
                db.execute("ROLLBACK")
                return str(holder)
            db.execute(
                "INSERT INTO benchmark_locks (target, benchmark_id, acquired_at) VALUES (?, ?, ?) "
                "ON CONFLICT(target) DO UPDATE SET benchmark_id = excluded.benchmark_id, "
                "acquired_at = excluded.acquired_at",
                (target, benchmark_id, time.time()),
            )
            db.execute("COMMIT")
            return None
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        finally:
            db.close()

    def release_lock(self, target: str, benchmark_id: str) -> None:
        with self._connect() as db:
            db.execute("DELETE FROM benchmark_locks WHERE target = ? AND benchmark_id = ?", (target, benchmark_id))

    # ---- the cluster ledger -------------------------------------------------------------------------
    def ledger_launch(
        self, cluster: str, backend: str, deployment_id: str | None = None, run_id: str | None = None
    ) -> None:
        """Record a cluster BEFORE launching it, so a crash mid-launch still leaves a trace to clean up.

        Its owner is its deployment's owner (a run, or the process that deployed it).
        """
        owner = (self.owner_of_deployment(deployment_id) if deployment_id else None) or run_id or self.process_owner()
        with self._connect() as db:
            db.execute(
                "INSERT INTO ledger (cluster, backend, deployment_id, run_id, launched_at, state, owner_id) "
                "VALUES (?, ?, ?, ?, ?, 'launching', ?) ON CONFLICT(cluster) DO UPDATE SET gone_at = NULL, "
                "state = 'launching', launched_at = excluded.launched_at, owner_id = excluded.owner_id",
                (cluster, backend, deployment_id, run_id, time.time(), owner),
            )

    def ledger_update(self, cluster: str, state: str, detail: str = "") -> None:
        """A new state for an open row; a row already gone stays gone (a launch in flight does not revive it)."""
        with self._connect() as db:
            db.execute(
                "UPDATE ledger SET state = ?, detail = ? WHERE cluster = ? AND gone_at IS NULL",
                (state, detail, cluster),
            )

    def ledger_open(self, cluster: str) -> bool:
        with self._connect() as db:
            row = db.execute("SELECT gone_at FROM ledger WHERE cluster = ?", (cluster,)).fetchone()
        return row is not None and row["gone_at"] is None

    def ledger_gone(self, cluster: str, detail: str = "") -> None:
        with self._connect() as db:
            db.execute(
                "UPDATE ledger SET state = 'gone', gone_at = ?, detail = ? WHERE cluster = ?",
                (time.time(), detail, cluster),
            )

    def ledger(self, open_only: bool = False) -> list[dict[str, Any]]:
        query = "SELECT * FROM ledger" + (" WHERE gone_at IS NULL" if open_only else "") + " ORDER BY launched_at"
        with self._connect() as db:
            return [dict(r) for r in db.execute(query).fetchall()]


def _decode(row: sqlite3.Row, json_columns: tuple[str, ...]) -> dict[str, Any]:
    out = dict(row)
    for column in json_columns:
        if out.get(column):
            out[column] = json.loads(out[column])
    return out
