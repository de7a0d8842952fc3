"""Deployments and the cluster ledger: what was deployed, and every cluster launched for it until it is gone.

A deployment row holds the whole Deployment as JSON; a terminated one never comes back alive. The ledger
records a cluster before it is launched, so a crash mid-launch still leaves a trace for `gc` to clean up.
Both rows take their owner from tools/store/runs.py: a run, else the process that made them.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from typing import Any

from worldtune.tools.store.runs import RunRecords
from worldtune.tools.words.deployment import ALIVE_STATES, Deployment


class DeploymentRecords(RunRecords):
    """The `deployments` and `ledger` tables."""

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
                (*_row(deployment, now), owner),
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
                _row(deployment, now),
            )
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


def _row(deployment: Deployment, now: float) -> tuple[Any, ...]:
    """A deployment's columns (id, run_id, state, infra, created_at, updated_at, body), as both inserts write them."""
    return (
        deployment.id,
        deployment.run_id,
        deployment.state,
        str(deployment.infra),
        deployment.created_at,
        now,
        deployment.model_dump_json(),
    )
