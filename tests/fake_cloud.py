"""A recording stand-in for a cloud backend (SkyPilot): no cloud can be reached from the test machine.

Not a test module. `RecordingCloudBackend` implements the Backend protocol the way SkyPilotBackend
records things (a ledger row before launch, the deployment ready with an endpoint, gone after
teardown) but starts nothing; every launch is appended to LAUNCHED so a test can count them. Tests
point `worldtune.tools.backends.registry.SKY_BACKEND` at it with monkeypatch.
"""

from __future__ import annotations

import time
from typing import Any

from worldtune.tools.store.database import Store
from worldtune.tools.words.deployment import Deployment, Progress

LAUNCHED: list[Deployment] = []
REPLANNED: list[tuple[str, str]] = []
SEAM = ("fake_cloud", "RecordingCloudBackend")
# When set, status() reports this state (e.g. "preempted"): the fuzz uses it so no benchmark thread is left
# polling an endpoint that does not exist.
STATUS_OVERRIDE: list[str] = []


class RecordingCloudBackend:
    """Mock of SkyPilotBackend (a cloud API cannot run here): records, never launches."""

    name = "recording-cloud"
    status_fresh_s = 0.0  # the fuzz overrides the state at will: always asked

    def __init__(self, store: Store, *args: Any, **kwargs: Any) -> None:
        self.store = store

    def launch(self, deployment: Deployment, progress: Progress | None = None) -> Deployment:
        cluster = f"fake-{deployment.id}"
        self.store.ledger_launch(cluster, self.name, deployment.id, deployment.run_id)
        LAUNCHED.append(deployment)
        ready = deployment.model_copy(
            update={"state": "ready", "cluster": cluster, "endpoints": ["http://127.0.0.1:9"], "ready_at": time.time()}
        )
        self.store.ledger_update(cluster, "ready")
        self.store.save_deployment(ready)
        return ready

    def status(self, deployment: Deployment) -> Deployment:
        if STATUS_OVERRIDE:
            return deployment.model_copy(update={"state": STATUS_OVERRIDE[0]})
        return deployment

    def replan(self, deployment: Deployment, plan: str, progress: Progress | None = None) -> Deployment:
        """The same node, the engine restarted under `plan` (recorded; nothing runs)."""
        REPLANNED.append((deployment.id, plan))
        ready = deployment.model_copy(update={"plan": plan, "state": "ready", "loads": deployment.loads + 1})
        if deployment.cluster:
            self.store.ledger_update(deployment.cluster, "ready", f"replanned to {plan}")
        self.store.save_deployment(ready)
        return ready

    def teardown(self, deployment: Deployment) -> Deployment:
        if deployment.cluster:
            self.store.ledger_gone(deployment.cluster, "down")
        gone = deployment.model_copy(update={"state": "terminated", "terminated_at": time.time()})
        self.store.save_deployment(gone)
        return gone
