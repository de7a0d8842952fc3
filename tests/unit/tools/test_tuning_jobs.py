"""The tuning-jobs capability (tools/runs/tuning_jobs.py) keeps a run's record around the Tuner that runs it:
recorded before it starts, failed when it dies of an error, its status read back; tested with a Tuner that runs
nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from worldtune.tools.runs import tuning_jobs
from worldtune.tools.store import owners
from worldtune.tools.store.database import Store
from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.goal import Goal
from worldtune.tools.words.tuning import Failed, TuningJob, TuningRequest


class FakeTuner:
    """Prepares run-1, runs nothing; what it was asked is kept for the test."""

    def __init__(self, fail_launch: bool = False) -> None:
        self.fail_launch = fail_launch
        self.launched: list[tuple[str, TuningRequest, bool]] = []
        self.failed: Failed | None = None
        self.alive = False
        self.seen_recorded: str | None = None
        self.store: Store | None = None

    def prepare(self, goal: str, request: TuningRequest) -> TuningJob:
        if goal == "ambiguous":
            raise InvalidInput("goal", goal, "one objective")
        return TuningJob(run_id="run-1", goal=Goal().model_dump(mode="json"))

    def launch(self, job: TuningJob, request: TuningRequest, failed: Failed) -> None:
        assert self.store is not None
        row = self.store.get_run(job.run_id)  # recorded before it starts
        self.seen_recorded = None if row is None else str(row["status"])
        if self.fail_launch:
            raise OSError("no process")
        self.launched.append((job.run_id, request, request.detach))
        self.failed = failed
        self.alive = True

    def progress(self, run_id: str, db_path: str) -> dict[str, Any]:
        return {"alive": self.alive, "error": None, "events": ["read goal"], "measurements": 2}

    def resume(self, run_id: str, approve: bool, db_path: str | None, failed: Failed) -> None:
        self.failed = failed

    def session_ended(self) -> list[str]:
        return []


def request(db: Path, detach: bool = False) -> TuningRequest:
    return TuningRequest(infra="local", engine="twin", twin_profile=None, time_scale=300.0, budget_usd=None,
                         max_iterations=30, yes=True, db_path=str(db), detach=detach)  # fmt: skip


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "wt.db")


def test_a_run_is_recorded_before_it_starts_and_its_failure_is_recorded(store: Store) -> None:
    tuner = FakeTuner()
    tuner.store = store
    with pytest.raises(InvalidInput):  # an ambiguous goal: nothing recorded
        tuning_jobs.start_tuning(store, tuner, "ambiguous", request(store.path))
    assert store.list_runs() == []
    run_id = tuning_jobs.start_tuning(store, tuner, "cheapest per clip", request(store.path))
    assert run_id == "run-1" and tuner.seen_recorded == "running"
    status = tuning_jobs.tuning_status(store, tuner, run_id)
    assert status["status"] == "running" and status["events"] == ["read goal"] and status["measurements"] == 2
    assert store.owner_alive(run_id)  # this process drives it in a thread: it owns the run
    assert tuner.failed is not None
    tuner.failed("RuntimeError: boom")
    tuner.alive = False
    status = tuning_jobs.tuning_status(store, tuner, run_id)
    assert status["status"] == "failed" and "summary" not in status
    assert store.get_run(run_id)["summary"] == {"error": "RuntimeError: boom"}  # type: ignore[index]


def test_a_run_whose_owner_is_gone_reads_interrupted_and_a_completed_one_has_its_summary(store: Store) -> None:
    tuner = FakeTuner()
    tuner.store = store
    run_id = tuning_jobs.start_tuning(store, tuner, "cheapest per clip", request(store.path))
    tuner.alive = False
    store.release_owner(run_id)  # its process let go without an end: interrupted
    assert tuning_jobs.tuning_status(store, tuner, run_id)["status"] == "interrupted"
    store.finish_run(run_id, "completed", {"recommendation": {"plan": "tp8"}})
    done = tuning_jobs.tuning_status(store, tuner, run_id)
    assert done["status"] == "completed" and done["summary"] == {"recommendation": {"plan": "tp8"}}
    with pytest.raises(InvalidInput, match="run-1"):  # an unknown id names the recent ones
        tuning_jobs.tuning_status(store, tuner, "tune-nope")


def test_a_detached_run_gets_the_resolved_database_and_is_let_go(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    tuner = FakeTuner()
    tuner.store = store
    given = request(store.path, detach=True).model_copy(update={"db_path": None})
    monkeypatch.setenv("WORLDTUNE_DB", str(store.path))
    run_id = tuning_jobs.start_tuning(Store(), tuner, "cheapest per clip", given)
    ((_, sent, detach),) = tuner.launched
    assert detach and sent.db_path == str(store.path)  # the child opens the same file whatever its environment
    assert (str(store.path), run_id) not in owners.HEARTBEAT.held()  # the spawned process heartbeats it


def test_a_launch_that_fails_is_recorded_failed(store: Store) -> None:
    tuner = FakeTuner(fail_launch=True)
    tuner.store = store
    with pytest.raises(OSError):
        tuning_jobs.start_tuning(store, tuner, "cheapest per clip", request(store.path))
    row = store.get_run("run-1")
    assert row is not None and row["status"] == "failed" and "no process" in row["summary"]["error"]
    assert not store.owner_alive("run-1")
