"""The leftovers of dead owners: what `worldtune gc` lists and tears down, however the owner died.

Every ledger row and deployment has an owner (a tuning run, or the process that deployed it; see
tools/store/owners.py). A row is needed while its owner is alive: not released, heartbeating, and on this
host its very process (pid + start time) still running. Everything else still open is garbage: a run
killed with SIGKILL, a run marked 'running' whose heartbeat went stale, a finished run that did not
clean up, a manual `worldtune deploy` whose command has exited. A deployment recorded as alive with no
open ledger row (its owner died before or after launching) is garbage too: it is marked terminated.
SkyPilot clusters are brought down by name; Kubernetes objects are re-rendered from the stored
Deployment and deleted; local twin processes are stopped by pid once their start time matches.

A capability: it reads the ledger and the owners from the results database and tears down through the
backends (sky/backend.py's `down` for a SkyPilot cluster by name, else the deploy capability's backend for the
stored Deployment's infra).
"""

from __future__ import annotations

import time
from typing import Any

from worldtune.tools.deployments import deploy
from worldtune.tools.store.database import Store

RECORD_ONLY = "record"  # a garbage row with nothing launched: only the stored deployment to settle


def _owner(store: Store, row: dict[str, Any]) -> str | None:
    return row.get("owner_id") or row.get("run_id")


def garbage(store: Store) -> list[dict[str, Any]]:
    """Open ledger rows whose owner is gone, then alive deployments of gone owners with no open ledger row."""
    found = []
    open_rows = store.ledger(open_only=True)
    for row in open_rows:
        if not store.owner_alive(_owner(store, row)):
            found.append(row)
    launched = {r["deployment_id"] for r in open_rows if r.get("deployment_id")}
    for deployment in store.list_deployments(alive_only=True):
        if deployment.id in launched or store.owner_alive(store.owner_of_deployment(deployment.id)):
            continue
        found.append(
            {
                "cluster": deployment.cluster or f"(none: {deployment.id})",
                "backend": RECORD_ONLY,
                "deployment_id": deployment.id,
                "run_id": deployment.run_id,
                "state": deployment.state,
            }
        )
    return found


def dead_runs(store: Store) -> list[dict[str, Any]]:
    """Runs still marked running whose owner is gone (killed, or its heartbeat stale)."""
    return [r for r in store.list_runs(10000) if r["status"] == "running" and not store.owner_alive(r["id"])]


def collect_garbage(store: Store, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tear down each row's cluster; returns the rows with a `result` each. Failures stay open for a retry.

    Runs whose owner died while 'running' are marked interrupted (resume continues them).
    """
    done = []
    sky_backend: Any = None
    for row in rows:
        try:
            if row["backend"] == RECORD_ONLY:
                result = _settle_record(store, row)
            elif row["backend"] == "skypilot":
                if sky_backend is None:
                    from worldtune.sky.backend import SkyPilotBackend

                    sky_backend = SkyPilotBackend(store)
                result = sky_backend.down(row["cluster"])
                _mark_terminated(store, row)
            else:
                result = _teardown_stored(store, row)
        except Exception as exc:  # report and go on: one stuck cluster must not keep the others up
            result = f"failed: {exc}"
            if row["backend"] != RECORD_ONLY:
                store.ledger_update(row["cluster"], "down-failed", str(exc)[:500])
        done.append({**row, "result": result})
    for run in dead_runs(store):
        store.finish_run(
            run["id"],
            "interrupted",
            {
                "error": "its process is gone (no heartbeat); gc tore down what it left",
                "resume": f"worldtune resume {run['id']}",
            },
        )
    return done


def _settle_record(store: Store, row: dict[str, Any]) -> str:
    """An alive deployment with no open ledger row: a local one is stopped by its recorded pids (a launch that
    lost a race with a teardown may have started a process after its ledger row closed); then terminated."""
    deployment = store.get_deployment(row["deployment_id"])
    if deployment is not None and deployment.infra.is_local:
        store.save_deployment(deploy.backend_for("local", store).teardown(deployment))
        return "stopped its recorded processes; terminated"
    _mark_terminated(store, row)
    return "marked terminated (nothing was launched)"


def _mark_terminated(store: Store, row: dict[str, Any]) -> None:
    deployment = store.get_deployment(row["deployment_id"]) if row.get("deployment_id") else None
    if deployment is not None and deployment.state != "terminated":
        store.save_deployment(deployment.model_copy(update={"state": "terminated", "terminated_at": time.time()}))


def _teardown_stored(store: Store, row: dict[str, Any]) -> str:
    """Kubernetes / local rows: tear down through the backend that made them, from the stored Deployment."""
    deployment = store.get_deployment(row["deployment_id"]) if row.get("deployment_id") else None
    if deployment is None:
        raise LookupError(f"no stored deployment for {row['cluster']}: tear it down by hand")
    gone = deploy.backend_for(deployment.infra, store).teardown(deployment)  # Kubernetes objects, local pids
    store.save_deployment(gone)
    store.ledger_gone(row["cluster"], "gc")
    return "down"
