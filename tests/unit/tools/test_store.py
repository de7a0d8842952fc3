"""The results database: samples survive as written, the ledger records before launch, WAL is on."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

from worldtune.tools.store.database import Store
from worldtune.tools.words.deployment import Deployment


def test_samples_are_committed_one_by_one(tmp_path: Path) -> None:
    store = Store(tmp_path / "w.db")
    store.create_benchmark("b1", {"steps": 4})
    for i in range(3):
        store.add_sample("b1", i, {"phase": "full", "steps": 4, "ok": True, "latency_s": 1.0 + i})
    # another connection (another process would be the same) sees all three at once
    with sqlite3.connect(tmp_path / "w.db") as db:
        assert db.execute("SELECT count(*) FROM samples WHERE benchmark_id='b1'").fetchone()[0] == 3
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert [s.latency_s for s in store.samples("b1")] == [1.0, 2.0, 3.0]
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


def test_a_terminated_deployment_never_comes_back_alive_whatever_a_late_save_says(tmp_path: Path) -> None:
    """A status check that read the deployment before a concurrent teardown must not bring it back; a failed
    start, torn down first, is still recorded failed with its reason."""
    store = Store(tmp_path / "w.db")
    dep = Deployment(gpu="H200", plan="tp8", state="ready")
    store.save_deployment(dep)
    store.save_deployment(dep.model_copy(update={"state": "terminated", "detail": "torn down"}))
    for late in ("ready", "loading", "provisioning", "pending", "preempted"):  # stale reads saved late
        store.save_deployment(dep.model_copy(update={"state": late}))
    kept = store.get_deployment(dep.id)
    assert kept is not None and kept.state == "terminated" and kept.detail == "torn down"
    assert [d.id for d in store.list_deployments(alive_only=True)] == []
    store.save_deployment(kept.model_copy(update={"detail": "torn down; again"}))  # terminated -> terminated
    assert store.get_deployment(dep.id).detail == "torn down; again"  # type: ignore[union-attr]
    store.save_deployment(kept.model_copy(update={"state": "failed", "detail": "CUDA out of memory"}))
    failed = store.get_deployment(dep.id)
    assert failed is not None and failed.state == "failed" and failed.detail == "CUDA out of memory"
    # what a status check writes is a compare-and-set: only over a record still alive
    other = Deployment(gpu="H200", plan="tp8", state="ready")
    store.save_deployment(other)
    store.save_deployment(other.model_copy(update={"state": "terminated", "detail": "lease ran out"}))
    store.save_deployment(other.model_copy(update={"state": "failed", "detail": "stale"}), if_alive=True)
    assert store.get_deployment(other.id).detail == "lease ran out"  # type: ignore[union-attr]


def test_ledger_open_until_gone(tmp_path: Path) -> None:
    store = Store(tmp_path / "w.db")
    store.ledger_launch("worldtune-abc", "skypilot", "wt-1", "r1")
    assert [r["cluster"] for r in store.ledger(open_only=True)] == ["worldtune-abc"]
    store.ledger_gone("worldtune-abc", "down")
    assert store.ledger(open_only=True) == []
    assert store.ledger()[0]["state"] == "gone"


# ---- owners, heartbeats, and one status for a benchmark whose process is gone ------------------------
OLD_SCHEMA = """
CREATE TABLE deployments (id TEXT PRIMARY KEY, run_id TEXT, state TEXT NOT NULL, infra TEXT NOT NULL,
    created_at REAL NOT NULL, updated_at REAL NOT NULL, body TEXT NOT NULL);
CREATE TABLE ledger (cluster TEXT PRIMARY KEY, backend TEXT NOT NULL, deployment_id TEXT, run_id TEXT,
    launched_at REAL NOT NULL, gone_at REAL, state TEXT NOT NULL, detail TEXT NOT NULL DEFAULT '');
"""


def in_a_process_that_exits(db: Path, code: str) -> None:
    """Run `code` (with `store` bound to the database) in a child process that then exits."""
    script = f"from worldtune.tools.store.database import Store\nstore = Store({str(db)!r})\n{code}"
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)


def test_a_database_from_before_owners_opens_and_gains_the_columns(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    with sqlite3.connect(db) as conn:
        conn.executescript(OLD_SCHEMA)
        dep = Deployment(gpu="H200", plan="tp8", state="ready")
        conn.execute(
            "INSERT INTO deployments VALUES (?, NULL, 'ready', 'local', 1.0, 1.0, ?)", (dep.id, dep.model_dump_json())
        )
        conn.execute("INSERT INTO ledger VALUES ('local-x', 'local', ?, NULL, 1.0, NULL, 'ready', '')", (dep.id,))
    store = Store(db)
    with sqlite3.connect(db) as conn:
        assert "owner_id" in {r[1] for r in conn.execute("PRAGMA table_info(ledger)")}
        assert "owner_id" in {r[1] for r in conn.execute("PRAGMA table_info(deployments)")}
    assert store.get_deployment(dep.id) == dep
    # nothing ever heartbeated for the old rows: their owner counts as gone
    assert store.owner_of_deployment(dep.id) is None and not store.owner_alive(None)
    Store(db)  # opening it again changes nothing


def test_an_owner_is_alive_while_its_very_process_runs_and_beats(tmp_path: Path) -> None:
    db = tmp_path / "w.db"
    store = Store(db)
    store.claim_owner("run-here", "tune")
    assert store.owner_alive("run-here")
    in_a_process_that_exits(db, "store.claim_owner('run-gone', 'tune')")
    assert store.get_owner("run-gone") is not None and not store.owner_alive("run-gone")
    store.release_owner("run-here")
    assert not store.owner_alive("run-here")
    store.claim_owner("run-stale", "tune")
    with sqlite3.connect(db) as conn:  # as if its heartbeat thread had not beaten for ten minutes
        conn.execute("UPDATE owners SET heartbeat_at = heartbeat_at - 600 WHERE id = 'run-stale'")
    assert not store.owner_alive("run-stale")
    store.claim_owner("run-reused", "tune")
    with sqlite3.connect(db) as conn:  # the same pid, started at another time: another process
        conn.execute("UPDATE owners SET pid_start = pid_start + 1 WHERE id = 'run-reused'")
    assert not store.owner_alive("run-reused")


def test_a_heartbeat_never_creates_a_database_where_one_was_removed(tmp_path: Path) -> None:
    """The heartbeat thread outlives the databases it stamps (a test's or a fuzz sequence's folder): a beat after
    the file is gone must not create an empty one (which also raced folder removal: 'Directory not empty')."""
    import pytest

    from worldtune.tools.store import owners

    db = tmp_path / "wt.db"
    store = Store(db)
    store.add_run("run-beat", "tune")
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE owners SET heartbeat_at = 0 WHERE id = 'run-beat'")
    owners.beat(str(db), "run-beat")
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT heartbeat_at FROM owners WHERE id = 'run-beat'").fetchone()[0] > 0
    for leftover in tmp_path.iterdir():  # the folder is removed (the database with its -wal and -shm)
        leftover.unlink()
    with pytest.raises(sqlite3.OperationalError):
        owners.beat(str(db), "run-beat")
    assert list(tmp_path.iterdir()) == []
    owners.HEARTBEAT.drop(db, "run-beat")


def test_a_benchmark_whose_process_is_gone_reads_failed_everywhere(tmp_path: Path) -> None:
    db = tmp_path / "w.db"
    config = "{'pid': os.getpid(), 'pid_start': owners.start_time(os.getpid()), 'host': owners.host()}"
    in_a_process_that_exits(
        db,
        "import os\nfrom worldtune.tools.store import owners\n"
        f"store.create_benchmark('b-dead', {config})\n"
        f"store.create_benchmark('b-done', {config})\n"
        "store.update_benchmark('b-done', status='completed')",
    )
    store = Store(db)
    assert {r["id"]: r["status"] for r in store.list_benchmarks()} == {"b-dead": "failed", "b-done": "completed"}
    row = store.get_benchmark("b-dead")
    assert row is not None and row["status"] == "failed" and "is gone" in row["message"]
    with sqlite3.connect(db) as conn:  # written back: every reader, in any process, sees the same status
        assert conn.execute("SELECT status FROM benchmarks WHERE id = 'b-dead'").fetchone()[0] == "failed"


def test_a_sample_is_stored_as_the_loop_wrote_it_and_read_back_typed(tmp_path: Path) -> None:
    """The database format does not change with the Sample word: the body holds the keys that were set (and any
    unknown key), nothing more; samples() reads them back as Samples, by attribute."""
    import json

    from worldtune.tools.words.sample import Sample

    store = Store(tmp_path / "w.db")
    store.create_benchmark("b1", {})
    written = {
        "seq": 0,
        "phase": "probe",
        "steps": 4,
        "concurrency": 1,
        "endpoint": "http://e",
        "ok": True,
        "error_kind": None,
        "latency_s": 26.5,
        "server_time_s": 25.0,
        "stage_durations": {},
        "a_new_key": [1],
    }
    store.add_sample("b1", 0, written)
    store.add_sample("b1", 1, Sample(seq=1, phase="full", steps=35, ok=False, error_kind="client_timeout"))
    with sqlite3.connect(tmp_path / "w.db") as db:
        bodies = [json.loads(b) for (b,) in db.execute("SELECT body FROM samples ORDER BY seq")]
        columns = db.execute("SELECT phase, steps, concurrency, endpoint, ok, error_kind FROM samples").fetchall()
    assert bodies == [written, {"seq": 1, "phase": "full", "steps": 35, "ok": False, "error_kind": "client_timeout"}]
    assert columns == [("probe", 4, 1, "http://e", 1, None), ("full", 35, 1, "", 0, "client_timeout")]
    probe, full = store.samples("b1")
    assert probe.latency_s == 26.5 and probe.server_time_s == 25.0 and probe.queue_ahead is None
    assert full.error_kind == "client_timeout" and full.record() == bodies[1]
    assert probe.record() == written  # unknown keys survive a round trip


def test_a_kept_connection_follows_the_file_not_the_name(tmp_path: Path) -> None:
    """Each thread keeps its connection to a file; a file removed and created again under the same name is another
    file: its tables are made again and nothing of the old one is read through a stale connection."""
    import threading

    from worldtune.tools.store import schema

    path = tmp_path / "w.db"
    store = Store(path)
    store.create_benchmark("old", {"steps": 4})
    assert store.get_benchmark("old") is not None
    for name in ("w.db", "w.db-wal", "w.db-shm"):
        (tmp_path / name).unlink(missing_ok=True)
    again = Store(path)  # the tables are ensured again for the new file
    assert again.get_benchmark("old") is None and store.get_benchmark("old") is None
    again.create_benchmark("new", {"steps": 4})
    with sqlite3.connect(path) as db:  # written to the new file, which another connection reads
        assert [r[0] for r in db.execute("SELECT id FROM benchmarks")] == ["new"]
    seen: list[bool] = []  # another thread has its own connection and sees the committed row
    thread = threading.Thread(target=lambda: seen.append(Store(path).get_benchmark("new") is not None))
    thread.start()
    thread.join()
    assert seen == [True]
    for i in range(schema.KEPT_PER_THREAD + 3):  # a thread keeps a bounded number of files open
        Store(tmp_path / f"many{i}.db").get_benchmark("x")
    assert len(schema._KEPT.conns) == schema.KEPT_PER_THREAD


def test_another_handle_in_this_process_never_drops_sqlites_locks(tmp_path: Path) -> None:
    """A Store made while this process holds the file open through SQLite must not open the file itself: closing any
    descriptor of it drops this process's POSIX locks, SQLite's read lock among them, and another process closing
    its last connection then checkpoints and deletes the WAL under ours ("disk I/O error", then "database disk image
    is malformed" under the signal faults of tests/integration/test_faults.py)."""
    path = tmp_path / "w.db"
    store = Store(path)
    store.create_benchmark("ours-1", {"steps": 4})
    writer = (
        'import sqlite3, sys; db = sqlite3.connect(sys.argv[1], timeout=30); db.execute("INSERT INTO benchmarks '
        "(id, status, config, started_at) VALUES (?, 'running', '{}', 0)\", (sys.argv[2],)); db.commit(); db.close()"
    )
    for i in range(3):
        Store(path)  # another handle in this process, as every MCP tool call makes one
        subprocess.run([sys.executable, "-c", writer, str(path), f"theirs-{i}"], check=True)
        store.create_benchmark(f"ours-{i + 2}", {"steps": 4})
    with sqlite3.connect(path) as db:
        ids = sorted(r[0] for r in db.execute("SELECT id FROM benchmarks"))
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert ids == sorted([f"ours-{i}" for i in range(1, 5)] + [f"theirs-{i}" for i in range(3)])
