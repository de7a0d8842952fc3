"""A deployment's status is asked of its backend at most once per `status_fresh_s` for the same stored record.

An agent checks each deployment's engine every 2 s while it benchmarks; on SkyPilot each check was a forced status
refresh plus a job query (seconds of requests, ~3 s of CPU on the cluster), asked back to back (issue 35). The
backend here is a counting stand-in for a cloud backend (no cloud can be reached here), set in the registry's seam.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from worldtune.tools.backends import registry as backend_registry
from worldtune.tools.deployments import deploy as deploying
from worldtune.tools.store.database import Store
from worldtune.tools.words.deployment import Deployment

ASKED: list[str] = []


class CountingCloudBackend:
    """A FAKE cloud backend: status() counts its asks and answers what it is told."""

    name = "counting-cloud"
    status_fresh_s = 60.0
    answer = "ready"

    def __init__(self, store: Store, *args: object, **kwargs: object) -> None:
        self.store = store

    def status(self, deployment: Deployment) -> Deployment:
        ASKED.append(deployment.id)
        return deployment.model_copy(update={"state": CountingCloudBackend.answer})


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Store:
    monkeypatch.setitem(sys.modules, "counting_cloud_seam", sys.modules[__name__])
    monkeypatch.setattr(backend_registry, "SKY_BACKEND", ("counting_cloud_seam", "CountingCloudBackend"))
    monkeypatch.setattr(CountingCloudBackend, "status_fresh_s", 60.0)
    monkeypatch.setattr(CountingCloudBackend, "answer", "ready")
    monkeypatch.setattr(deploying, "_answered", {})  # another test's answers are not this one's
    ASKED.clear()
    return Store(tmp_path / "wt.db")


def ready(store: Store, detail: str = "serve job 1") -> Deployment:
    dep = Deployment(id="wt-fresh001", gpu="H200", plan="tp8", infra="nebius", engine="vllm-omni", state="ready",
                     cluster="worldtune-wt-fresh001", endpoints=["http://127.0.0.1:9"], detail=detail)  # fmt: skip
    store.save_deployment(dep)
    return dep


def test_asks_again_within_the_window_are_answered_from_the_last_ask(store: Store) -> None:
    ready(store)
    answers = [deploying.get_deployment("wt-fresh001", store=store).state for _ in range(5)]
    assert answers == ["ready"] * 5 and ASKED == ["wt-fresh001"]
    CountingCloudBackend.answer = "preempted"  # the cloud changed its mind; the window still answers the last ask
    assert deploying.get_deployment("wt-fresh001", store=store).state == "ready" and len(ASKED) == 1


def test_a_changed_record_or_a_zero_window_asks_the_backend(store: Store) -> None:
    ready(store)
    deploying.get_deployment("wt-fresh001", store=store)
    ready(store, detail="serve job 2")  # relaunched or replanned since: the old answer is not this record's
    CountingCloudBackend.answer = "preempted"
    assert deploying.get_deployment("wt-fresh001", store=store).state == "preempted" and len(ASKED) == 2
    CountingCloudBackend.status_fresh_s = 0.0  # a backend where asking is cheap is asked every time
    for _ in range(3):
        deploying.get_deployment("wt-fresh001", store=store)
    assert len(ASKED) == 5


def test_the_window_ends(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    ready(store)
    deploying.get_deployment("wt-fresh001", store=store)
    later = time.monotonic() + 61.0
    monkeypatch.setattr(deploying.time, "monotonic", lambda: later)
    deploying.get_deployment("wt-fresh001", store=store)
    assert len(ASKED) == 2
    assert deploying.get_deployment("wt-fresh001", store=store, refresh=False).state == "ready" and len(ASKED) == 2
