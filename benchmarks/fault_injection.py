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
completed benchmarks the record does not carry. Prints a table; saves JSON. The database and process
probes behind these checks are in benchmarks/_fault_probes.py.

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
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _fault_probes import (
    ENV,
    RUN_S,
    WORLDTUNE,
    events,
    gc,
    leaked,
    leftovers,
    live_twins,
    query,
    record_check,
    run_ids,
    start_ticks,
    wait_until,
    worldtune,
)
from _run_clock import stamped

ROOT = Path(__file__).resolve().parents[1]
GOAL = "Cosmos3-Super, 720p 189-frame clips, p95 under 150 s, cheapest per clip, H200 or B200, spot ok, budget $300"
TIME_SCALE = "3000"  # model seconds per wall second: the search's timings stay, the waiting goes
SIGNALS = {"SIGKILL": signal.SIGKILL, "SIGTERM": signal.SIGTERM, "SIGINT": signal.SIGINT}


# ---- the scenarios ----------------------------------------------------------------------------------
OUTPUT: dict[int, tuple[Any, Any]] = {}  # a spawned child's pid -> its stdout and stderr files


def _spawn(args: list[str]) -> subprocess.Popen[str]:
    """`worldtune ARGS` in its own process group (the signal goes to the group as a terminal or `timeout` would
    send it), its output in files: a pipe nobody reads while the scenario waits for database events would stop
    the child at its 64 KiB-th byte of progress, and the wait would then be for events that never come."""
    out, err = (tempfile.TemporaryFile("w+") for _ in range(2))  # noqa: SIM115 (closed by _finish)
    child = subprocess.Popen(
        [WORLDTUNE, *args], stdout=out, stderr=err, stdin=subprocess.DEVNULL, text=True, env=ENV,
        start_new_session=True,
    )  # fmt: skip
    OUTPUT[child.pid] = (out, err)
    return child


def _output(child: subprocess.Popen[str]) -> tuple[str, str]:
    """What a spawned child wrote so far (stdout, stderr)."""
    texts = []
    for f in OUTPUT[child.pid]:
        f.flush()
        f.seek(0)
        texts.append(f.read())
    return texts[0], texts[1]


def _finish(child: subprocess.Popen[str]) -> tuple[str, str]:
    """Wait for a spawned child to end; its stdout and stderr."""
    child.wait(timeout=RUN_S)
    texts = _output(child)
    for f in OUTPUT.pop(child.pid):
        f.close()
    return texts


def _wait_for(child: subprocess.Popen[str], done: Callable[[], bool], what: str) -> None:
    """wait_until `done` or the child's end; a wait that times out says what the child was last writing."""
    try:
        wait_until(lambda: done() or child.poll() is not None, what)
    except TimeoutError as exc:
        raise TimeoutError(f"{exc}; the child's last output: {_output(child)[1][-1500:]}") from None


def final_outcome(db: Path, run_id: str, code: int | None, stdout: str, stderr: str) -> dict[str, Any]:
    """The record check of a run's last process, with what explains an exit without a recommendation: its stop
    reason, the errors of its failed measurements and its last stderr (CI showed only the counts once)."""
    outcome: dict[str, Any] = {"run_id": run_id, "final_exit_code": code, **record_check(db, run_id)}
    outcome["final_stop_reason"] = json.loads(stdout).get("stop_reason") if stdout.strip() else None
    if code != 0:
        summary = json.loads(query(db, "SELECT summary FROM runs WHERE id = ?", (run_id,))[0][0] or "{}")
        failed = [m for m in summary.get("measurements", []) if m.get("failed")]
        outcome["failed_measurements"] = [f"{m.get('kind')} {m.get('key')}: {m.get('error')}" for m in failed]
        outcome["final_stderr_tail"] = stderr[-1500:]
    return outcome


def resumed_to_the_end(db: Path, run_id: str) -> dict[str, Any]:
    """`worldtune resume RUN` to its end; final_outcome plus what it left behind."""
    last = worldtune("resume", run_id, "--json", "--db", str(db))
    outcome = final_outcome(db, run_id, last.returncode, last.stdout, last.stderr)
    outcome["leaks_after_completion"] = sum(leftovers(db).values())
    return outcome


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
        _wait_for(child, lambda: events(db) >= base + k, f"{k} events")  # noqa: B023
        finished_first = child.poll() is not None
        if not finished_first:
            os.killpg(child.pid, SIGNALS[name])
        _, stderr = _finish(child)
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
    outcome = resumed_to_the_end(db, run_id)
    return faults, outcome


def engine_fault(db: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """SIGKILL one twin process of a ready deployment mid-run: the tune goes on and cleans up after itself."""
    child = _spawn(["tune", GOAL, "--yes", "--json", "--db", str(db), "--time-scale", TIME_SCALE])
    benchmarking = "SELECT id FROM benchmarks WHERE status = 'running'"
    _wait_for(child, lambda: bool(live_twins(db)) and bool(query(db, benchmarking)), "a benchmark on a live twin")
    victims = live_twins(db)[:1]
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    stdout, stderr = _finish(child)
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
    outcome = final_outcome(db, run_id, child.returncode, stdout, stderr)
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
    outcome = resumed_to_the_end(db, run_id)
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
    outcome = resumed_to_the_end(db, run_id)
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
    Path(args.out).write_text(json.dumps(stamped(report), indent=2) + "\n")
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
