"""Fault injection's probes: what the results database and the process table say after a fault.

benchmarks/fault_injection.py's scenarios kill tuning runs and then ask these: the database's event count
(the kill points are "after the k-th event"), what is still up (open ledger rows, deployments recorded alive,
twin processes alive, checked by pid and start time), what `worldtune gc --yes` tore down, and whether a
run's record uses every benchmark it completed. Also the `worldtune` command and the environment that the
scenarios start it with (fault_injection.main sets its cache folder).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

WORLDTUNE = str(Path(sys.executable).parent / "worldtune")
EVENTS_SQL = (
    "SELECT (SELECT count(*) FROM samples) + (SELECT count(*) FROM benchmarks)"
    " + (SELECT count(*) FROM benchmarks WHERE status != 'running') + (SELECT count(*) FROM deployments)"
    " + (SELECT count(*) FROM ledger) + (SELECT count(*) FROM ledger WHERE gone_at IS NOT NULL)"
)
RUN_S = 600.0  # the most one tuning process may take here before the scenario counts as failed
ENV = {**os.environ, "SKYPILOT_DISABLE_USAGE_COLLECTION": "1", "PYTHONUNBUFFERED": "1"}


# ---- looking at the database and the processes -----------------------------------------------------
def query(db: Path, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Read-only rows; none while the database or its tables do not exist yet."""
    if not db.exists():
        return []
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return list(conn.execute(sql, args).fetchall())
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return []
        raise
    finally:
        conn.close()


def events(db: Path) -> int:
    rows = query(db, EVENTS_SQL)
    return int(rows[0][0]) if rows else 0


def wait_until(done: Callable[[], bool], what: str, timeout_s: float = RUN_S, poll_s: float = 0.02) -> None:
    """Wait for an event (a row, a process exit), polling; bounded, and says what never happened."""
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout_s:.0f} s for {what}")
        time.sleep(poll_s)


def start_ticks(pid: int) -> int | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else int(fields[19])


def twin_processes(db: Path) -> list[tuple[int, int | None]]:
    """(pid, start ticks) of every twin process any ledger row or deployment ever recorded."""
    found: dict[int, int | None] = {}
    texts = [r[0] for r in query(db, "SELECT detail FROM ledger")]
    texts += [json.dumps(json.loads(r[0]).get("handle") or {}) for r in query(db, "SELECT body FROM deployments")]
    for text in texts:
        try:
            data = json.loads(text or "{}")
        except ValueError:
            continue
        if isinstance(data, dict):
            starts = list(data.get("starts") or [])
            for i, pid in enumerate(data.get("pids") or []):
                found.setdefault(int(pid), starts[i] if i < len(starts) else None)
    return sorted(found.items())


def live_twins(db: Path) -> list[int]:
    return [pid for pid, started in twin_processes(db) if (now := start_ticks(pid)) and now == (started or now)]


def leaked(db: Path) -> list[str]:
    """What is still up, named: for a report that says what leaked, not only how much."""
    alive = ("pending", "provisioning", "loading", "ready")
    found = [f"ledger {r[0]} ({r[1]})" for r in query(db, "SELECT cluster, state FROM ledger WHERE gone_at IS NULL")]
    for (body,) in query(db, "SELECT body FROM deployments"):
        d = json.loads(body)
        if d["state"] in alive:
            found.append(f"deployment {d['id']} ({d['state']})")
    found += [f"twin pid {pid}" for pid in live_twins(db)]
    return found


def leftovers(db: Path) -> dict[str, int]:
    """What is still up: open ledger rows, deployments recorded alive, twin processes alive."""
    alive = ("pending", "provisioning", "loading", "ready")
    states = [json.loads(r[0])["state"] for r in query(db, "SELECT body FROM deployments")]
    return {
        "open_ledger_rows": len(query(db, "SELECT cluster FROM ledger WHERE gone_at IS NULL")),
        "alive_deployments": sum(1 for s in states if s in alive),
        "live_twin_processes": len(live_twins(db)),
    }


def worldtune(*args: str, timeout_s: float = RUN_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [WORLDTUNE, *args], capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL, env=ENV
    )


def gc(db: Path, cli: bool = False) -> int:
    """`worldtune gc --yes` (the command, or the same capability in this process, a few seconds cheaper);
    returns how many things it tore down."""
    if not cli:
        from worldtune.tools.runs.garbage import collect_garbage, garbage
        from worldtune.tools.store.database import Store

        store = Store(db)
        return len(collect_garbage(store, garbage(store)))
    out = worldtune("gc", "--yes", "--json", "--db", str(db))
    if out.returncode != 0:
        raise RuntimeError(f"gc failed: {out.stderr[-2000:]}")
    return len(json.loads(out.stdout)["torn_down"])


def record_check(db: Path, run_id: str) -> dict[str, int]:
    """Completed benchmarks of the run the record does not use, and their (or used ones') samples it lacks.

    A full run over lanes is one measurement resting on several benchmarks (`benchmark_ids`): each of them is
    used, and the measurement must hold the samples of all of them."""
    summary = json.loads(query(db, "SELECT summary FROM runs WHERE id = ?", (run_id,))[0][0] or "{}")
    measured = [m for m in summary.get("measurements", []) if m.get("benchmark_id") and not m.get("failed")]
    rests_on = [(m, m.get("benchmark_ids") or [m["benchmark_id"]]) for m in measured]
    used = {b: m for m, ids in rests_on for b in ids}
    completed = [
        r[0] for r in query(db, "SELECT id FROM benchmarks WHERE run_id = ? AND status = 'completed'", (run_id,))
    ]

    def full_ok(bench_id: str) -> int:
        sql = "SELECT count(*) FROM samples WHERE benchmark_id = ? AND ok = 1 AND phase = 'full'"
        return int(query(db, sql, (bench_id,))[0][0])

    repeated = sum(1 for b in completed if b not in used)
    lost = sum(full_ok(b) for b in completed if b not in used)
    done = set(completed)
    for m, ids in rests_on:
        if m.get("kind") == "full" and any(b in done for b in ids):
            lost += max(0, sum(full_ok(b) for b in ids) - len(m.get("latencies_s") or []))
    twice = sum(len(ids) for _, ids in rests_on) - len(used)  # one benchmark in two measurements: spend twice
    return {"completed_benchmarks": len(completed), "repeated": repeated, "samples_lost": lost, "counted_twice": twice}


def run_ids(db: Path) -> list[str]:
    return [r[0] for r in query(db, "SELECT id FROM runs ORDER BY created_at")]
