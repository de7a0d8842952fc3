"""Kill the client: how long a run outlives an MCP client killed with SIGKILL, and what it billed after.

One `worldtune mcp --transport http --run-grace-s G` server (local twins, results database in a temporary
folder, run sweep every S s) and, per trial, a real client process that starts a run and is SIGKILLed once
the run has a ready deployment and a measured sample:

- start_tuning: tests/integration/run_client.py calls start_tuning over HTTP and heartbeats (heartbeat_run);
- agent: `worldtune tune GOAL --mcp-url URL --yes` drives the graph in the client process; its tools client
  heartbeats the run in the background (agent/tools_client.py).

Measured from the database the server writes: kill -> the run marked abandoned, kill -> its last deployment
terminated and its last ledger row closed, deployments alive at the end, samples kept, and the node-hours the
ledger shows after the kill. Billed: the ledger's node-hours after the kill x the deployments' own price (the
local twin is free: $0, measured) and, assumed, x $28/h, an 8xH200 on-demand node, for what the same
teardown would have cost on real hardware. Prints a table; saves JSON.

    .venv/bin/python benchmarks/client_abandon.py [--trials 3] [--grace 5] [--sweep 1]
        [--modes start_tuning,agent] [--out benchmarks/results/client_abandon.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))  # the benchmarks' helpers, also when run by path
from _run_clock import stamped

ROOT = Path(__file__).resolve().parents[1]
WORLDTUNE = Path(sys.executable).parent / "worldtune"
CLIENT = ROOT / "tests" / "integration" / "run_client.py"
GOAL = "Cosmos3-Super, 720p 189-frame clips, p95 under 150 s, cheapest per clip, H200, budget $300"
ASSUMED_USD_PER_NODE_HOUR = 28.0  # 8xH200 on-demand (issue 27), not measured here


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


BENCHED_AFTER = "SELECT 1 FROM benchmarks WHERE run_id = ? AND started_at > ?"


def query(db: Path, sql: str, *args: Any) -> list[dict[str, Any]]:
    with sqlite3.connect(db, timeout=30) as con:
        con.row_factory = sqlite3.Row
        try:
            return [dict(r) for r in con.execute(sql, args).fetchall()]
        except sqlite3.OperationalError:  # a table not made yet
            return []


def wait_for(what: str, check: Callable[[], Any], bound_s: float) -> Any:
    deadline = time.monotonic() + bound_s
    while not (found := check()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {bound_s:.0f} s")
        time.sleep(0.1)
    return found


def start_server(db: Path, grace_s: float, sweep_s: float, env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    port = free_port()
    cmd = [str(WORLDTUNE), "mcp", "--transport", "http", "--port", str(port), "--db", str(db),
           "--run-grace-s", str(grace_s)]  # fmt: skip
    log = (db.parent / "server.log").open("w")
    proc = subprocess.Popen(cmd, env={**env, "WORLDTUNE_RUN_SWEEP_S": str(sweep_s)}, stdout=log,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip

    def listening() -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    wait_for("the server listening", listening, 120)
    return proc, f"http://127.0.0.1:{port}/mcp"


def start_client(mode: str, url: str, grace_s: float, env: dict[str, str], work: Path) -> subprocess.Popen[str]:
    if mode == "start_tuning":
        cmd = [sys.executable, str(CLIENT), url, GOAL, str(grace_s), "attached"]
    else:  # the agent drives the graph here; its checkpoints stay local, everything else is the server's
        cmd = [str(WORLDTUNE), "tune", GOAL, "--mcp-url", url, "--yes", "--time-scale", "60",
               "--db", str(work / "client.db")]  # fmt: skip
    log = (work / f"client-{mode}-{time.monotonic_ns()}.log").open("w")  # read back when a trial fails
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True)


def tail(path: Path, chars: int = 1500) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else ""


def new_run(db: Path, known: set[str]) -> str | None:
    rows = query(db, "SELECT run_id FROM run_clients")
    fresh = [r["run_id"] for r in rows if r["run_id"] not in known]
    return fresh[0] if fresh else None


def trial(mode: str, db: Path, url: str, grace_s: float, env: dict[str, str], work: Path) -> dict[str, Any]:
    known = {r["run_id"] for r in query(db, "SELECT run_id FROM run_clients")}
    client = start_client(mode, url, grace_s, env, work)
    try:
        run_id = wait_for("the client's run bound", lambda: new_run(db, known), 300)
        sampled = "SELECT COUNT(*) AS n FROM samples s JOIN benchmarks b ON b.id = s.benchmark_id WHERE b.run_id = ?"
        wait_for("a sample", lambda: query(db, sampled, run_id)[0]["n"] > 0 or client.poll() is not None, 600)
        if client.poll() is not None:
            raise RuntimeError(f"the client exited ({client.returncode}) before a sample of its run")
    finally:
        client.send_signal(signal.SIGKILL)
        client.wait()
    killed = time.time()
    status = query(db, "SELECT status FROM runs WHERE id = ?", run_id)
    if status and status[0]["status"] in ("completed", "failed"):  # nothing left to abandon: not a kill mid-run
        raise RuntimeError(f"run {run_id} was already {status[0]['status']} when its client was killed")
    samples_at_kill = query(db, sampled, run_id)[0]["n"]
    wait_for("the run abandoned", lambda: query(db, "SELECT 1 FROM runs WHERE id = ? AND status = 'abandoned'",
                                                run_id), 300)  # fmt: skip
    wait_for("its teardown recorded",
             lambda: query(db, "SELECT 1 FROM run_clients WHERE run_id = ? AND torn_down_at IS NOT NULL", run_id),
             300)  # fmt: skip
    client_row = query(db, "SELECT * FROM run_clients WHERE run_id = ?", run_id)[0]
    deployments = query(db, "SELECT id, state, body FROM deployments WHERE run_id = ?", run_id)
    bodies = [json.loads(d["body"]) for d in deployments]
    ledger = query(db, "SELECT * FROM ledger WHERE run_id = ?", run_id)
    after = [max(0.0, float(r["gone_at"] or time.time()) - max(killed, float(r["launched_at"]))) for r in ledger]
    price = {b["id"]: float(b.get("usd_per_hour") or 0.0) for b in bodies}
    billed = sum(a / 3600 * price.get(str(r["deployment_id"]), 0.0) for a, r in zip(after, ledger, strict=True))
    terminated = [float(b["terminated_at"]) for b in bodies if b.get("terminated_at")]
    return {
        "mode": mode,
        "run_id": run_id,
        "kill_to_abandoned_s": round(float(client_row["abandoned_at"]) - killed, 2),
        "kill_to_torn_down_s": round(max(terminated) - killed, 2) if terminated else None,
        "kill_to_ledger_closed_s": round(max(float(r["gone_at"] or time.time()) for r in ledger) - killed, 2)
        if ledger
        else None,
        "reason": client_row["reason"],
        "deployments": len(deployments),
        "alive_after": sum(1 for d in deployments if d["state"] not in ("terminated", "failed")),
        "ledger_rows": [{k: r[k] for k in ("cluster", "backend", "launched_at", "gone_at", "state")} for r in ledger],
        "node_hours_after_kill": round(sum(after) / 3600, 6),
        # issue 36: a run whose client is gone starts nothing new while it waits out its grace
        "launches_after_kill": sum(1 for r in ledger if float(r["launched_at"]) > killed),
        "benchmarks_after_kill": len(query(db, BENCHED_AFTER, run_id, killed)),
        "billed_after_kill_usd": round(billed, 4),
        "assumed_8xh200_usd": round(sum(after) / 3600 * ASSUMED_USD_PER_NODE_HOUR, 4),
        "samples_at_kill": samples_at_kill,
        "samples_kept": query(db, sampled, run_id)[0]["n"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--grace", type=float, default=5.0)
    parser.add_argument("--sweep", type=float, default=1.0)
    parser.add_argument("--modes", default="start_tuning,agent")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "client_abandon.json"))
    args = parser.parse_args()
    env = {**os.environ, "SKYPILOT_DISABLE_USAGE_COLLECTION": "1"}
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="client-abandon-") as tmp:
        work = Path(tmp)
        db = work / "results.db"
        env["XDG_CACHE_HOME"] = str(work / "cache")
        server, url = start_server(db, args.grace, args.sweep, env)
        try:
            for mode in args.modes.split(","):
                for _ in range(args.trials):
                    try:
                        rows.append(trial(mode, db, url, args.grace, env, work))
                        print(f"{mode}: {rows[-1]['kill_to_abandoned_s']} s to abandoned", file=sys.stderr)
                    except Exception as exc:  # kept in the JSON: a failed trial is a result too
                        logs = sorted(work.glob(f"client-{mode}-*.log"))
                        rows.append({"mode": mode, "error": f"{type(exc).__name__}: {exc}",
                                     "client_log_tail": tail(logs[-1]) if logs else "",
                                     "server_log_tail": tail(work / "server.log")})  # fmt: skip
                        print(f"{mode}: FAILED {rows[-1]['error']}", file=sys.stderr)
        finally:
            server.terminate()
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
    done = [r for r in rows if "error" not in r]
    print(f"grace {args.grace:g} s, sweep {args.sweep:g} s; local twins (measured), 8xH200 price assumed")
    print(f"{'mode':<13} {'abandoned s':>11} {'torn down s':>11} {'ledger s':>9} {'alive':>5} {'node-h after':>12} "
          f"{'billed $':>8} {'@$28/h':>7} {'samples':>9} {'launched':>8} {'benched':>7}")  # fmt: skip

    def sec(v: float | None, width: int) -> str:
        return f"{v:>{width}.2f}" if v is not None else f"{'-':>{width}}"

    for r in done:
        print(f"{r['mode']:<13} {r['kill_to_abandoned_s']:>11.2f} {sec(r['kill_to_torn_down_s'], 11)} "
              f"{sec(r['kill_to_ledger_closed_s'], 9)} {r['alive_after']:>5} {r['node_hours_after_kill']:>12.5f} "
              f"{r['billed_after_kill_usd']:>8.2f} {r['assumed_8xh200_usd']:>7.3f} "
              f"{r['samples_at_kill']:>4}/{r['samples_kept']:<4} {r['launches_after_kill']:>8} "
              f"{r['benchmarks_after_kill']:>7}")  # fmt: skip
    for r in rows:
        if "error" in r:
            print(f"{r['mode']:<13} FAILED: {r['error']}")
    report = {
        "what": "seconds from SIGKILL of an HTTP MCP client to its run abandoned and torn down by the server, and "
        "the ledger's node-hours after the kill",
        "measured": "times and ledger rows from the server's results database; local twin deployments",
        "simulated": "the GPU servers (local twins, free)",
        "assumed": f"${ASSUMED_USD_PER_NODE_HOUR}/h per 8xH200 on-demand node for assumed_8xh200_usd",
        "grace_s": args.grace,
        "sweep_s": args.sweep,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "load": os.getloadavg()},
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "trials": rows,
        "failed_trials": len(rows) - len(done),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(stamped(report), indent=2) + "\n")


if __name__ == "__main__":
    main()
