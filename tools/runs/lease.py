"""The hours paid for, enforced: a deployment asked for `hold_hours` is torn down once they have run out.

A deployment's lease is the `hours` its caller asked for (and the guardrails committed): it runs from the
moment the current plan answered /health (`ready_at`, set again by every replan) or from the end of the last
benchmark on it, whichever is later, and it never runs out while a benchmark measures it. On SkyPilot the
cluster enforces it itself (sky/backend.py: a hard autodown `hours` after the last job was submitted).
Local twins and Kubernetes objects have no such timer, so worldtune enforces it: every `worldtune gc` and,
in a long-lived MCP server, a sweep every `WORLDTUNE_LEASE_SWEEP_S` seconds (default 30) tears down what
`expired` lists, through the backend that made it (its ledger row closed, as for any teardown).

The lease is wall-clock time on every engine: the twin's time scale speeds its engine, not the clock a
caller reads, so a rehearsal's deployment lives as long as a real one would be paid for.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from worldtune.tools.bench import lock as benchmark_lock
from worldtune.tools.store.database import Store
from worldtune.tools.words.deployment import Backend, Deployment
from worldtune.tools.words.errors import InvalidInput

SWEEP_ENV = "WORLDTUNE_LEASE_SWEEP_S"
DEFAULT_SWEEP_S = 30.0


def sweep_interval_s() -> float:
    """Seconds between two sweeps of a long-lived server; a bad setting is refused, naming it."""
    raw = os.environ.get(SWEEP_ENV, "")
    if not raw:
        return DEFAULT_SWEEP_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not (0 < value <= 3600):
        raise InvalidInput(SWEEP_ENV, raw, "seconds between lease sweeps, a number in (0, 3600]")
    return value


def _last_benchmark_ends(store: Store) -> dict[str, float]:
    """Deployment id -> when the last benchmark on it finished (one read of the recent benchmarks)."""
    ends: dict[str, float] = {}
    for row in store.list_benchmarks(limit=1000):
        if row.get("deployment_id") and row.get("finished_at"):
            key = str(row["deployment_id"])
            ends[key] = max(ends.get(key, 0.0), float(row["finished_at"]))
    return ends


def deadline(store: Store, deployment: Deployment, ends: dict[str, float] | None = None) -> float | None:
    """When the deployment's paid hours run out (epoch seconds); None while it has no lease to run out: no
    hours asked, not alive, still starting, or being measured now. `ends`: _last_benchmark_ends, if read."""
    if deployment.hold_hours is None or deployment.state != "ready" or deployment.ready_at is None:
        return None
    if benchmark_lock.holder(store, benchmark_lock.lock_target(deployment.id, [])) is not None:
        return None
    ends = _last_benchmark_ends(store) if ends is None else ends
    return max(deployment.ready_at, ends.get(deployment.id, 0.0)) + deployment.hold_hours * 3600.0


def expired(store: Store, now: float | None = None) -> list[Deployment]:
    """Live deployments whose paid hours have run out (SkyPilot's included: its own autodown may be late)."""
    now = time.time() if now is None else now
    ends = _last_benchmark_ends(store)
    found = []
    for deployment in store.list_deployments(alive_only=True):
        due = deadline(store, deployment, ends)
        if due is not None and now >= due:
            found.append(deployment)
    return found


def expire(
    store: Store, now: float | None = None, backend_for: Callable[[Deployment], Backend] | None = None
) -> list[dict[str, Any]]:
    """Tear down every expired deployment through the backend that made it (`backend_for`: tools/deploy's by
    default); one that fails to come down is reported and retried at the next sweep."""
    if backend_for is None:
        from worldtune.tools.deployments import deploy

        def backend_for(deployment: Deployment) -> Backend:
            return deploy.backend_for(deployment.infra, store)

    done = []
    for deployment in expired(store, now):
        why = f"its {deployment.hold_hours:g} h ran out"
        try:
            gone = backend_for(deployment).teardown(deployment)  # the backend closes its ledger row
            store.save_deployment(gone.model_copy(update={"detail": f"{gone.detail}; torn down: {why}".strip("; ")}))
            result = f"down: {why}"
        except Exception as exc:  # report and go on: one stuck deployment must not keep the others up
            result = f"failed: {type(exc).__name__}: {exc}"
        done.append(
            {
                "deployment_id": deployment.id,
                "cluster": deployment.cluster,
                "infra": str(deployment.infra),
                "hold_hours": deployment.hold_hours,
                "result": result,
            }
        )
    return done


class Sweeper:
    """A long-lived server's lease sweep: `expire` every `interval_s` on a daemon thread until stopped."""

    def __init__(self, db_path: str | None, interval_s: float | None = None) -> None:
        import threading

        self.db_path = db_path
        self.interval_s = sweep_interval_s() if interval_s is None else interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="worldtune-lease-sweep", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                expire(Store(self.db_path))
            except Exception as exc:  # a locked or vanished database: try again next time, never kill the server
                import logging

                logging.getLogger("worldtune.lease").warning("lease sweep failed: %s: %s", type(exc).__name__, exc)

    def __enter__(self) -> Sweeper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
