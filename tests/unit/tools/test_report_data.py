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

BASE = {"gpu": "H200", "capacity": "spot", "plan": "tp8", "feasible": True}
CANDIDATES = [
    {**BASE, "key": "slow-cheap", "stage": "measured", "latency_s": 120.0, "usd_per_clip": 0.4,
     "clips_per_hour_per_node": 30.0},
    {**BASE, "key": "dominated", "stage": "predicted", "latency_s": 130.0, "usd_per_clip": 0.5,
     "clips_per_hour_per_node": 20.0},
    {**BASE, "key": "fast-dear", "stage": "probed", "latency_s": 90.0, "usd_per_clip": 0.9,
     "clips_per_hour_per_node": 40.0},
    {**BASE, "key": "invalid", "stage": "predicted", "latency_s": None, "usd_per_clip": None},
]  # fmt: skip


def test_report_data_reads_the_completed_run_with_its_frontiers_and_folder(tmp_path: Path) -> None:
    store = Store(tmp_path / "wt.db")
    store.add_run("tune-1", "tune", Goal().model_dump(mode="json"))
    with pytest.raises(InvalidInput, match="a completed run") as unfinished:
        report_data("tune-1", store.path)
    assert "worldtune resume tune-1" in str(unfinished.value)
    record = {"run_id": "tune-1", "candidates": CANDIDATES, "recommendation": None}
    store.finish_run("tune-1", "completed", record)
    data = report_data("tune-1", store.path)
    assert data.record == record and data.artifacts == {}  # no recommendation: nothing to render
    assert data.folder == str(tmp_path / "reports" / "tune-1")
    # in order of latency; the dominated candidate and the one without figures are off both frontiers
    assert [c["key"] for c in data.frontier("latency_s", "usd_per_clip")] == ["fast-dear", "slow-cheap"]
    assert [c["key"] for c in data.frontier("latency_s", "clips_per_hour_per_node")] == ["fast-dear"]
    with pytest.raises(InvalidInput, match="tune-1"):  # an unknown run names the recent ones
        report_data("tune-nope", store.path)
