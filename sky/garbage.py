"""The ledger's leftovers: clusters still recorded as up that no running tuning run needs, and tearing them down.

A ledger row is needed while its run is still 'running'; everything else that is not marked gone
is garbage (a crashed run, a finished run that did not clean up, a manual `worldtune deploy`).
SkyPilot clusters are brought down by name; Kubernetes objects are re-rendered from the stored
Deployment and deleted; local process groups go through the local backend when it is installed.
"""

from __future__ import annotations

import time
from typing import Any

from worldtune.tools.store import Store


def garbage(store: Store) -> list[dict[str, Any]]:
    """Open ledger rows whose run is not running (or that belong to no run)."""
    found = []
    for row in store.ledger(open_only=True):
        run = store.get_run(row["run_id"]) if row.get("run_id") else None
        if run is not None and run.get("status") == "running":
            continue
        found.append(row)
    return found


def collect_garbage(store: Store, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tear down each row's cluster; returns the rows with a `result` each. Failures stay open for a retry."""
    done = []
    sky_backend: Any = None
    for row in rows:
        try:
            if row["backend"] == "skypilot":
                if sky_backend is None:
                    from worldtune.sky.backend import SkyPilotBackend

                    sky_backend = SkyPilotBackend(store)
                result = sky_backend.down(row["cluster"])
                _mark_terminated(store, row)
            else:
                result = _teardown_stored(store, row)
        except Exception as exc:  # report and go on: one stuck cluster must not keep the others up
            result = f"failed: {exc}"
            store.ledger_update(row["cluster"], "down-failed", str(exc)[:500])
        done.append({**row, "result": result})
    return done


def _mark_terminated(store: Store, row: dict[str, Any]) -> None:
    deployment = store.get_deployment(row["deployment_id"]) if row.get("deployment_id") else None
    if deployment is not None and deployment.state != "terminated":
        store.save_deployment(deployment.model_copy(update={"state": "terminated", "terminated_at": time.time()}))


def _teardown_stored(store: Store, row: dict[str, Any]) -> str:
    """Kubernetes / local rows: tear down through the backend that made them, from the stored Deployment."""
    deployment = store.get_deployment(row["deployment_id"]) if row.get("deployment_id") else None
    if deployment is None:
        raise LookupError(f"no stored deployment for {row['cluster']}: tear it down by hand")
    if row["backend"] == "kubernetes":
        from worldtune.sky.kubernetes import KubernetesBackend

        gone = KubernetesBackend(store).teardown(deployment)
    else:
        from worldtune.tools import deploy

        gone = deploy.backend_for(deployment.infra, store).teardown(deployment)
    store.save_deployment(gone)
    store.ledger_gone(row["cluster"], "gc")
    return "down"
