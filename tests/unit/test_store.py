"""The results database: samples survive as written, the ledger records before launch, WAL is on."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from worldtune.tools.deployment import Deployment
from worldtune.tools.store import Store


def test_samples_are_committed_one_by_one(tmp_path: Path) -> None:
    store = Store(tmp_path / "w.db")
    store.create_benchmark("b1", {"steps": 4})
    for i in range(3):
        store.add_sample("b1", i, {"phase": "full", "steps": 4, "ok": True, "latency_s": 1.0 + i})
    # another connection (another process would be the same) sees all three at once
    with sqlite3.connect(tmp_path / "w.db") as db:
        assert db.execute("SELECT count(*) FROM samples WHERE benchmark_id='b1'").fetchone()[0] == 3
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert [s["latency_s"] for s in store.samples("b1")] == [1.0, 2.0, 3.0]
    store.add_sample("b1", 1, {"phase": "full", "steps": 4, "ok": False, "error_kind": "timeout"})
    assert len(store.samples("b1")) == 3  # same seq replaces, never duplicates


def test_benchmark_status_and_result(tmp_path: Path) -> None:
    store = Store(tmp_path / "w.db")
    store.create_benchmark("b2", {"steps": 35}, deployment_id="wt-1", run_id="r1")
    store.update_benchmark("b2", progress=0.5, message="half")
    store.update_benchmark("b2", status="completed", result={"latency_mean": 3.0})
    bench = store.get_benchmark("b2")
    assert bench is not None and bench["status"] == "completed" and bench["finished_at"]
    assert bench["result"] == {"latency_mean": 3.0} and bench["config"] == {"steps": 35}
    assert [b["id"] for b in store.list_benchmarks(run_id="r1")] == ["b2"]


def test_deployments_round_trip(tmp_path: Path) -> None:
    store = Store(tmp_path / "w.db")
    dep = Deployment(gpu="H200", plan="cfg2-u4-hsdp8", run_id="r1")
    store.save_deployment(dep)
    store.save_deployment(dep.model_copy(update={"state": "ready", "endpoints": ["http://127.0.0.1:8000"]}))
    back = store.get_deployment(dep.id)
    assert back is not None and back.state == "ready" and back.endpoints == ["http://127.0.0.1:8000"]
    assert [d.id for d in store.list_deployments(alive_only=True)] == [dep.id]


def test_ledger_open_until_gone(tmp_path: Path) -> None:
    store = Store(tmp_path / "w.db")
    store.ledger_launch("worldtune-abc", "skypilot", "wt-1", "r1")
    assert [r["cluster"] for r in store.ledger(open_only=True)] == ["worldtune-abc"]
    store.ledger_gone("worldtune-abc", "down")
    assert store.ledger(open_only=True) == []
    assert store.ledger()[0]["state"] == "gone"
