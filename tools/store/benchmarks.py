"""Benchmarks, their samples and their locks: every measured request, written the moment it is measured.

A benchmark row says how far a benchmark got and what it found; each sample is one request, idempotent on
(benchmark, seq), so a crash or a kill loses nothing already measured. A 'running' benchmark whose process
is gone reads as failed. A lock holds a target (a deployment or an endpoint set) for one benchmark at a time.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Mapping
from typing import Any

from worldtune.tools.store import owners
from worldtune.tools.store.schema import Database, decode_row
from worldtune.tools.words.sample import Sample


class BenchmarkRecords(Database):
    """The `benchmarks`, `samples` and `benchmark_locks` tables."""

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
        return self._settled(decode_row(row, ("config", "result"))) if row else None

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
        return decode_row(fresh, ("config", "result"))

    def list_benchmarks(self, run_id: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        query, args = "SELECT * FROM benchmarks", []
        if run_id:
            query += " WHERE run_id = ?"
            args.append(run_id)
        with self._connect() as db:
            rows = db.execute(query + " ORDER BY started_at DESC LIMIT ?", (*args, limit)).fetchall()
        return [self._settled(decode_row(r, ("config", "result"))) for r in rows]

    def add_sample(self, benchmark_id: str, seq: int, sample: Sample | Mapping[str, Any]) -> None:
        """Write one measured request at once (idempotent on (benchmark, seq)); a mapping is read as a Sample."""
        s = Sample.of(sample)
        with self._connect() as db:
            db.execute(
                "INSERT OR REPLACE INTO samples (benchmark_id, seq, phase, steps, concurrency, endpoint, sent_at, "
                "latency_s, server_time_s, ok, error_kind, status_code, body) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    benchmark_id,
                    seq,
                    s.phase,
                    s.steps,
                    s.concurrency,
                    s.endpoint,
                    s.sent_at if s.sent_at is not None else time.time(),
                    s.latency_s,
                    s.server_time_s,
                    1 if s.ok else 0,
                    s.error_kind,
                    s.status_code,
                    json.dumps(s.record(), default=str),
                ),
            )

    def samples(self, benchmark_id: str) -> list[Sample]:
        """Every stored sample of a benchmark, in seq order."""
        with self._connect() as db:
            rows = db.execute(
                "SELECT body FROM samples WHERE benchmark_id = ? ORDER BY seq", (benchmark_id,)
            ).fetchall()
        return [Sample.from_json(r["body"]) for r in rows]

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
