"""The report-data capability (tools/results/report_data.py): the completed run's record from the database, its
frontiers and folder, and clear refusals for an unknown or unfinished run; agent/report.py only draws what it is
given."""

from __future__ import annotations

from pathlib import Path

import pytest

from worldtune.tools.results.report_data import report_data
from worldtune.tools.store.database import Store
from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.goal import Goal

BASE = {"gpu": "H200", "capacity": "spot", "plan": "tp8", "feasible": True, "offer": "nebius/x/H200:8/spot",
        "usd_per_hour": 11.6, "nodes": 1, "predicted_latency_s": None, "predicted_usd_per_clip": None,
        "predicted_clips_per_hour_per_node": None}  # fmt: skip
CANDIDATES = [
    {**BASE, "key": "slow-cheap", "stage": "measured", "latency_s": 120.0, "latency_q_s": 121.0, "usd_per_clip": 0.4,
     "clips_per_hour_per_node": 30.0},
    {**BASE, "key": "dominated", "stage": "predicted", "latency_s": 130.0, "latency_q_s": 131.0, "usd_per_clip": 0.5,
     "clips_per_hour_per_node": 20.0},
    {**BASE, "key": "fast-dear", "stage": "probed", "latency_s": 90.0, "latency_q_s": 91.0, "usd_per_clip": 0.9,
     "clips_per_hour_per_node": 40.0},
]  # fmt: skip
SPEND = {"gpu_hours": 1.0, "usd": 11.6, "budget_usd": None, "deployments": 1, "replans": 0, "benchmarks": 1,
         "model_seconds": 450.0, "answer_hours": 0.5, "lanes": 1, "full_requests": 59, "confidence": 0.95,
         "answer_basis": "modelled", "priced_as": "offer price x modelled GPU seconds"}  # fmt: skip


def test_report_data_reads_the_completed_run_with_its_frontiers_and_folder(tmp_path: Path) -> None:
    store = Store(tmp_path / "wt.db")
    store.add_run("tune-1", "tune", Goal().model_dump(mode="json"))
    with pytest.raises(InvalidInput, match="a completed run") as unfinished:
        report_data("tune-1", store.path)
    assert "worldtune resume tune-1" in str(unfinished.value)
    goal = {**Goal().model_dump(mode="json"), "text": "cheapest", "describe": "cheapest per clip"}
    record = {"run_id": "tune-1", "thread_id": "tune-1", "goal": goal, "spend": SPEND, "candidates": CANDIDATES}
    store.finish_run("tune-1", "completed", record)
    data = report_data("tune-1", store.path)
    assert data.summary.goal.description == "cheapest per clip" and data.summary.goal.text == "cheapest"
    again = data.summary.record()
    assert {k: again[k] for k in record} == record  # what was stored reads back as it was
    assert data.artifacts == {}  # no recommendation: nothing to render
    assert data.folder == str(tmp_path / "reports" / "tune-1")
    # in order of latency; the dominated candidate and the one without figures are off both frontiers
    assert [c.key for c in data.frontier("latency_s", "usd_per_clip")] == ["fast-dear", "slow-cheap"]
    assert [c.key for c in data.frontier("latency_s", "clips_per_hour_per_node")] == ["fast-dear"]
    with pytest.raises(InvalidInput, match="tune-1"):  # an unknown run names the recent ones
        report_data("tune-nope", store.path)


def test_a_record_this_version_cannot_read_is_refused_by_its_field(tmp_path: Path) -> None:
    """A completed run's record without what the report draws from (an edited database, another version) is
    refused with the run, the field and what is wrong: no traceback, no record echoed."""
    store = Store(tmp_path / "wt.db")
    store.add_run("tune-2", "tune", Goal().model_dump(mode="json"))
    store.finish_run("tune-2", "completed", {"run_id": "tune-2", "thread_id": "tune-2", "goal": {}, "candidates": []})
    with pytest.raises(InvalidInput, match=r"run_id='tune-2'.*its spend: Field required"):
        report_data("tune-2", store.path)
