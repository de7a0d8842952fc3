"""Fault injection: kill tuning runs at random points and count what leaks and what resume repeats or loses.

Scenarios, all on the local twin (real `worldtune` processes, real twin processes, one results database):

- signals: one tuning run is killed again and again, each time `k` database events after it (re)started
  (k drawn from a seeded generator; an event is a row written: a sample, a benchmark, a benchmark's end, a
  deployment, a ledger row, a ledger row closed), with SIGKILL, SIGTERM or SIGINT sent to its process
  group, as `timeout`, systemd or a terminal would. After each kill: `worldtune gc --yes`, then the
  checks; then `worldtune resume` continues the run (and is killed at its next point). At the end the
  run is resumed to completion.
- engine: one twin process of a ready deployment is SIGKILLed while the tune runs; the tune must finish.
- mcp-disconnect: `start_tuning` over a stdio MCP session (`worldtune mcp`), the client disconnects
  mid-run; then gc, then `worldtune resume` to completion.
- mcp-detach: the same with detach=true: the run goes on in its own process after the session ends;
  that process is then SIGKILLed; gc, then resume to completion.

After every fault: no open ledger row, no deployment recorded alive, no twin process alive (checked by
pid and start time); `leaks` counts what was still there after gc. After every completed run the
record is checked against the database: `repeated` counts completed benchmarks the run's record does
not use (a finished measurement run again, or dropped), `samples_lost` the successful samples of
completed benchmarks the record does not carry. Prints a table; saves JSON.

    .venv/bin/python benchmarks/fault_injection.py [--seed 12] [--kills 20]
        [--scenarios signals,engine,mcp-disconnect,mcp-detach] [--out benchmarks/results/fault_injection.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WORLDTUNE = str(Path(sys.executable).parent / "worldtune")
GOAL = "Cosmos3-Super, 720p 189-frame clips, p95 under 150 s, cheapest per clip, H200 or B200, spot ok, budget $300"
TIME_SCALE = "3000"  # model seconds per wall second: the search's timings stay, the waiting goes
EVENTS_SQL = (
    "SELECT (SELECT count(*) FROM samples) + (SELECT count(*) FROM benchmarks)"
    " + (SELECT count(*) FROM benchmarks WHERE status != 'running') + (SELECT count(*) FROM deployments)"
    " + (SELECT count(*) FROM ledger) + (SELECT count(*) FROM ledger WHERE gone_at IS NOT NULL)"
)
RUN_S = 600.0  # the most one tuning process may take here before the scenario counts as failed
SIGNALS = {"SIGKILL": signal.SIGKILL, "SIGTERM": signal.SIGTERM, "SIGINT": signal.SIGINT}


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
    texts += [json.loads(r[0]).get("detail", "") for r in query(db, "SELECT body FROM deployments")]
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
        from worldtune.sky.garbage import collect_garbage, garbage
        from worldtune.tools.store import Store

        store = Store(db)
        return len(collect_garbage(store, garbage(store)))
    out = worldtune("gc", "--yes", "--json", "--db", str(db))
    if out.returncode != 0:
        raise RuntimeError(f"gc failed: {out.stderr[-2000:]}")
    return len(json.loads(out.stdout)["torn_down"])


def record_check(db: Path, run_id: str) -> dict[str, int]:
    """Completed benchmarks of the run the record does not use, and their (or used ones') samples it lacks."""
    summary = json.loads(query(db, "SELECT summary FROM runs WHERE id = ?", (run_id,))[0][0] or "{}")
    measured = [m for m in summary.get("measurements", []) if m.get("benchmark_id") and not m.get("failed")]
    used = {m["benchmark_id"]: m for m in measured}
    completed = [
        r[0] for r in query(db, "SELECT id FROM benchmarks WHERE run_id = ? AND status = 'completed'", (run_id,))
    ]
    repeated, lost = 0, 0
    for bench_id in completed:
        full_ok = query(
            db, "SELECT count(*) FROM samples WHERE benchmark_id = ? AND ok = 1 AND phase = 'full'", (bench_id,)
        )
        in_db = int(full_ok[0][0])
        if bench_id not in used:
            repeated += 1
            lost += in_db
        elif used[bench_id].get("kind") == "full":
            lost += max(0, in_db - len(used[bench_id].get("latencies_s") or []))
    twice = len(measured) - len(used)  # one benchmark recorded as two measurements: its spend counted twice
    return {"completed_benchmarks": len(completed), "repeated": repeated, "samples_lost": lost, "counted_twice": twice}


def run_ids(db: Path) -> list[str]:
    return [r[0] for r in query(db, "SELECT id FROM runs ORDER BY created_at")]


# ---- the scenarios ----------------------------------------------------------------------------------
def _spawn(args: list[str]) -> subprocess.Popen[str]:
    # its own process group, so the signal goes to the group as a terminal or `timeout` would send it
    return subprocess.Popen(
        [WORLDTUNE, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
        env=ENV, start_new_session=True,
    )  # fmt: skip


def signal_faults(db: Path, rng: random.Random, kills: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One run killed `kills` times at random points (gc and resume after each), then resumed to its end."""
    faults: list[dict[str, Any]] = []
    run_id: str | None = None
    order = [list(SIGNALS)[i % len(SIGNALS)] for i in range(kills)]  # each signal about as often, seeded order
    rng.shuffle(order)
    for name in order:
        k = rng.randint(1, 4)
        base = events(db)
        child = _spawn(
            ["tune", GOAL, "--yes", "--json", "--db", str(db), "--time-scale", TIME_SCALE]
            if run_id is None
            else ["resume", run_id, "--json", "--db", str(db)]
        )
        wait_until(lambda: events(db) >= base + k or child.poll() is not None, f"{k} events")  # noqa: B023
        finished_first = child.poll() is not None
        if not finished_first:
            os.killpg(child.pid, SIGNALS[name])
        _, stderr = child.communicate(timeout=RUN_S)
        run_id = run_id or run_ids(db)[-1]
        status = query(db, "SELECT status FROM runs WHERE id = ?", (run_id,))[0][0]
        left_by_run = leftovers(db)
        torn = gc(db, cli=not faults)  # the command once, the capability after
        left = leftovers(db)
        faults.append({
            "scenario": "signals", "signal": name, "kill_after_events": k, "events_at_kill": events(db) - base,
            "finished_before_the_kill": finished_first, "exit_code": child.returncode, "run_status": status,
            "left_for_gc": sum(left_by_run.values()), "gc_tore_down": torn, "leaks": sum(left.values()),
            "leak_detail": left, "leaked": leaked(db) if sum(left.values()) else [],
            "stderr_tail": "" if child.returncode else stderr[-500:],
        })  # fmt: skip
        if finished_first:
            break
    assert run_id is not None
    last = worldtune("resume", run_id, "--json", "--db", str(db))
    outcome = {"run_id": run_id, "final_exit_code": last.returncode, **record_check(db, run_id)}
    outcome["final_stop_reason"] = json.loads(last.stdout).get("stop_reason") if last.stdout.strip() else None
    outcome["leaks_after_completion"] = sum(leftovers(db).values())
    return faults, outcome


def engine_fault(db: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """SIGKILL one twin process of a ready deployment mid-run: the tune goes on and cleans up after itself."""
    child = _spawn(["tune", GOAL, "--yes", "--json", "--db", str(db), "--time-scale", TIME_SCALE])
    benchmarking = "SELECT id FROM benchmarks WHERE status = 'running'"
    wait_until(lambda: (bool(live_twins(db)) and bool(query(db, benchmarking))) or child.poll() is not None,
               "a benchmark on a live twin")  # fmt: skip
    victims = live_twins(db)[:1]
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    stdout, stderr = child.communicate(timeout=RUN_S)
    run_id = run_ids(db)[-1]
    left_by_run = leftovers(db)
    torn = gc(db)
    left = leftovers(db)
    fault = {
        "scenario": "engine", "signal": "SIGKILL (twin)", "killed_pid": victims[0] if victims else None,
        "exit_code": child.returncode, "run_status": query(db, "SELECT status FROM runs WHERE id = ?", (run_id,))[0][0],
        "left_for_gc": sum(left_by_run.values()), "gc_tore_down": torn, "leaks": sum(left.values()),
        "leak_detail": left,
        "stderr_tail": stderr[-500:] if child.returncode not in (0, 3) else "",
    }  # fmt: skip
    outcome = {"run_id": run_id, "final_exit_code": child.returncode, **record_check(db, run_id)}
    outcome["final_stop_reason"] = json.loads(stdout).get("stop_reason") if stdout.strip() else None
    outcome["leaks_after_completion"] = sum(left.values())
    return [fault], outcome


def mcp_disconnect_fault(db: Path, rng: random.Random) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """start_tuning over a stdio MCP session, disconnect k events later; gc; resume to the end."""
    import anyio
    from mcp import Client, StdioServerParameters

    k = rng.randint(2, 6)
    server = StdioServerParameters(command=WORLDTUNE, args=["mcp", "--db", str(db)], env=ENV)

    async def session() -> str:
        async with Client(server) as client:
            base = events(db)
            started = await client.call_tool("start_tuning", {"goal": GOAL, "time_scale": float(TIME_SCALE)})
            content = started.structured_content or {}
            run = str(content.get("run_id") or run_ids(db)[-1])
            deadline = time.monotonic() + RUN_S
            while events(db) < base + k and time.monotonic() < deadline:
                await anyio.sleep(0.02)
        return run  # leaving the block closes the session: stdin closes, then the SDK escalates to signals

    run_id = anyio.run(session)
    owner = query(db, "SELECT pid, pid_start FROM owners WHERE id = ?", (run_id,))
    if owner:  # the server process that drove the run: wait until it is gone
        pid, started = owner[0]
        wait_until(lambda: start_ticks(pid) != started, "the MCP server to exit", 60)
    status = query(db, "SELECT status FROM runs WHERE id = ?", (run_id,))[0][0]
    left_by_run = leftovers(db)
    torn = gc(db, cli=True)
    left = leftovers(db)
    fault = {
        "scenario": "mcp-disconnect", "signal": "session end", "kill_after_events": k, "exit_code": None,
        "run_status": status, "left_for_gc": sum(left_by_run.values()), "gc_tore_down": torn,
        "leaks": sum(left.values()), "leak_detail": left, "stderr_tail": "",
    }  # fmt: skip
    last = worldtune("resume", run_id, "--json", "--db", str(db))
    outcome = {"run_id": run_id, "final_exit_code": last.returncode, **record_check(db, run_id)}
    outcome["final_stop_reason"] = json.loads(last.stdout).get("stop_reason") if last.stdout.strip() else None
    outcome["leaks_after_completion"] = sum(leftovers(db).values())
    return [fault], outcome


def mcp_detach_fault(db: Path, rng: random.Random) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """start_tuning(detach=true), the client disconnects k events later: the run goes on in its own process;
    then that process is SIGKILLed a few events later; gc; resume to the end."""
    import anyio
    from mcp import Client, StdioServerParameters

    k, later = rng.randint(2, 6), rng.randint(1, 4)
    server = StdioServerParameters(command=WORLDTUNE, args=["mcp", "--db", str(db)], env=ENV)

    async def session() -> str:
        async with Client(server) as client:
            base = events(db)
            arguments = {"goal": GOAL, "time_scale": float(TIME_SCALE), "detach": True}
            started = await client.call_tool("start_tuning", arguments)
            run = str((started.structured_content or {}).get("run_id") or run_ids(db)[-1])
            deadline = time.monotonic() + RUN_S
            while events(db) < base + k and time.monotonic() < deadline:
                await anyio.sleep(0.02)
        return run

    run_id = anyio.run(session)
    base = events(db)
    done = ("completed", "failed", "interrupted")
    status_sql = "SELECT status FROM runs WHERE id = ?"
    wait_until(lambda: events(db) >= base + later or query(db, status_sql, (run_id,))[0][0] in done,
               "the detached run to go on after the session ended")  # fmt: skip
    outlived = events(db) > base  # it kept measuring with no session and no server
    (pid, started), *_ = query(db, "SELECT pid, pid_start FROM owners WHERE id = ?", (run_id,))
    if start_ticks(pid) == started:
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: start_ticks(pid) != started, "the detached run's process to die", 60)
    status = query(db, status_sql, (run_id,))[0][0]
    left_by_run = leftovers(db)
    torn = gc(db)
    left = leftovers(db)
    fault = {
        "scenario": "mcp-detach", "signal": "SIGKILL (detached run)", "kill_after_events": later, "exit_code": None,
        "run_status": status, "outlived_the_session": outlived, "left_for_gc": sum(left_by_run.values()),
        "gc_tore_down": torn, "leaks": sum(left.values()), "leak_detail": left, "stderr_tail": "",
    }  # fmt: skip
    last = worldtune("resume", run_id, "--json", "--db", str(db))
    outcome = {"run_id": run_id, "final_exit_code": last.returncode, **record_check(db, run_id)}
    outcome["final_stop_reason"] = json.loads(last.stdout).get("stop_reason") if last.stdout.strip() else None
    outcome["leaks_after_completion"] = sum(leftovers(db).values())
    return [fault], outcome


# ---- the report -------------------------------------------------------------------------------------
def run_all(workdir: Path, seed: int, kills: int, scenarios: tuple[str, ...]) -> dict[str, Any]:
    rng = random.Random(seed)
    faults: list[dict[str, Any]] = []
    outcomes: list[dict[str, Any]] = []
    started = time.monotonic()
    for name in scenarios:
        db = workdir / f"{name}.db"
        if name == "signals":
            found, outcome = signal_faults(db, rng, kills)
        elif name == "engine":
            found, outcome = engine_fault(db)
        elif name == "mcp-detach":
            found, outcome = mcp_detach_fault(db, rng)
        else:
            found, outcome = mcp_disconnect_fault(db, rng)
        faults += found
        outcomes.append({"scenario": name, **outcome})
    return {
        "seed": seed,
        "faults_injected": len(faults),
        "by_signal": {s: sum(1 for f in faults if f["signal"] == s) for s in sorted({f["signal"] for f in faults})},
        "leaks_found": sum(f["leaks"] for f in faults) + sum(o["leaks_after_completion"] for o in outcomes),
        "left_for_gc": sum(f["left_for_gc"] for f in faults),
        # a signalled tune or resume that reported success (the engine scenario's tune is meant to go on)
        "killed_runs_that_exited_0": sum(
            1
            for f in faults
            if f["scenario"] == "signals" and f["exit_code"] == 0 and not f["finished_before_the_kill"]
        ),
        "repeated_measurements": sum(o["repeated"] for o in outcomes),
        "samples_lost": sum(o["samples_lost"] for o in outcomes),
        "measurements_counted_twice": sum(o["counted_twice"] for o in outcomes),
        "runs_completed": sum(1 for o in outcomes if o["final_exit_code"] in (0, 3) and o["final_stop_reason"]),
        "wall_s": round(time.monotonic() - started, 1),
        "faults": faults,
        "runs": outcomes,
    }  # fmt: skip


def print_report(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"fault injection (seed {report['seed']}, {report['wall_s']} s)")
    for column in (
        "scenario",
        "signal",
        "after k events",
        "exit",
        "run status",
        "left for gc",
        "gc tore down",
        "leaks",
    ):
        table.add_column(column)
    for f in report["faults"]:
        table.add_row(
            f["scenario"], f["signal"], str(f.get("kill_after_events", "-")), str(f["exit_code"]), f["run_status"],
            str(f["left_for_gc"]), str(f["gc_tore_down"]), str(f["leaks"]),
        )  # fmt: skip
    console = Console(stderr=False, width=140)
    console.print(table)
    runs = Table(title="each run, resumed to its end")
    for column in ("scenario", "exit", "stop", "completed benchmarks", "repeated", "samples lost", "leaks"):
        runs.add_column(column)
    for o in report["runs"]:
        runs.add_row(
            o["scenario"], str(o["final_exit_code"]), str(o["final_stop_reason"])[:40], str(o["completed_benchmarks"]),
            str(o["repeated"]), str(o["samples_lost"]), str(o["leaks_after_completion"]),
        )  # fmt: skip
    console.print(runs)
    keys = ("faults_injected", "by_signal", "leaks_found", "left_for_gc", "killed_runs_that_exited_0",
            "repeated_measurements", "samples_lost", "measurements_counted_twice", "runs_completed")  # fmt: skip
    console.print({k: report[k] for k in keys})


ENV = {**os.environ, "SKYPILOT_DISABLE_USAGE_COLLECTION": "1", "PYTHONUNBUFFERED": "1"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--kills", type=int, default=20, help="signals sent to the one killed-and-resumed run")
    parser.add_argument("--scenarios", default="signals,engine,mcp-disconnect,mcp-detach")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "fault_injection.json"))
    parser.add_argument("--keep", default=None, help="keep the databases in this folder (default: a temporary one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="worldtune-faults-") as tmp:
        workdir = Path(args.keep or tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        ENV["XDG_CACHE_HOME"] = str(Path(tmp) / "cache")
        report = run_all(workdir, args.seed, args.kills, tuple(args.scenarios.split(",")))
    report |= {
        "command": " ".join(["benchmarks/fault_injection.py", *sys.argv[1:]]),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "load_avg": os.getloadavg(), "python": platform.python_version()},
    }
    print_report(report)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
