"""Where the main job's wall time goes: the agent's own thinking against the twin's scaled waits (issue 35 item 3).

    .venv/bin/python benchmarks/profile_main_job.py [--goal GOAL] [--top 10] [--no-profile]

Runs the main job (`worldtune tune MAIN_GOAL --yes --json` on the embedded default: infra local, engine twin, time
scale 300) twice in a child process: once plain, for its CPU seconds, and once under cProfile on every thread
(thread CPU time), for the functions that spend them. What each figure is:
- wall s: MEASURED, the tune process from start to exit;
- agent CPU s: MEASURED, user + system CPU of the tune process itself, every thread (the graph, the search's
  posterior draws and candidate scoring, the in-process MCP server's JSON round trips, SQLite, the benchmark
  client); this is the agent's thinking;
- twins CPU s: MEASURED, CPU of the child processes it started and waited for (the twin servers);
- waiting s: wall s - agent CPU s, the time the agent was not computing (mostly the twins' scaled sleeps,
  provisioning and loads modelled at the time scale, and its polling);
- GPU-h, answer hours, recommendation: the run's MODELLED figures (they must not change with speed work);
- top functions: MEASURED by cProfile with each thread's CPU clock (the profiler's own overhead inflates them;
  their order, not their sum, is the finding).
Prints two tables and saves benchmarks/results/profile_main_job.json.
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).parent))  # the benchmarks' helpers, also when run by path
from _run_clock import stamped
from main_job import MAIN_GOAL

RESULTS = Path(__file__).parent / "results" / "profile_main_job.json"
REPO = Path(__file__).resolve().parents[1]


def child(out: Path, profile: bool, argv: list[str]) -> None:
    """Run `worldtune ARGV` in this process (every thread profiled when asked); write its timing beside OUT."""
    import cProfile
    import resource
    import threading

    profiles: list[cProfile.Profile] = []
    if profile:
        run = threading.Thread.run

        def profiled(self: threading.Thread) -> None:
            p = cProfile.Profile(time.thread_time)
            profiles.append(p)
            p.enable()
            try:
                run(self)
            finally:
                p.disable()

        threading.Thread.run = profiled  # type: ignore[method-assign]
        main = cProfile.Profile(time.thread_time)
        profiles.append(main)
        main.enable()
    from worldtune.cli import main as worldtune

    started = time.monotonic()
    code = 0
    sys.argv = ["worldtune", *argv]
    try:
        worldtune()
    except SystemExit as exc:
        code = int(exc.code or 0) if not isinstance(exc.code, str) else 1
    wall = time.monotonic() - started
    if profile:
        profiles[0].disable()
        stats = pstats.Stats(profiles[0])
        for p in profiles[1:]:
            stats.add(p)
        stats.dump_stats(str(out.with_suffix(".prof")))
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    out.write_text(json.dumps({"exit_code": code, "wall_s": wall, "agent_cpu_s": own.ru_utime + own.ru_stime,
                               "twins_cpu_s": kids.ru_utime + kids.ru_stime}))  # fmt: skip


def run_once(goal: str, profile: bool, tmp: Path) -> dict[str, Any]:
    out = tmp / ("profiled.json" if profile else "plain.json")
    db = tmp / ("profiled.db" if profile else "plain.db")
    cmd = [sys.executable, __file__, "--child", str(out), *(["--profile"] if profile else []), "--",
           "tune", goal, "--yes", "--json", "--db", str(db)]  # fmt: skip
    env = {**os.environ, "SKYPILOT_DISABLE_USAGE_COLLECTION": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, stdin=subprocess.DEVNULL, env=env)
    timing = json.loads(out.read_text())
    data = json.loads(done.stdout) if done.stdout.strip() else {}
    spend, rec = data.get("spend") or {}, data.get("recommendation") or {}
    return {
        **{k: round(v, 2) if isinstance(v, float) else v for k, v in timing.items()},
        "waiting_s": round(timing["wall_s"] - timing["agent_cpu_s"], 2),
        "gpu_hours": spend.get("gpu_hours"), "usd": spend.get("usd"), "answer_hours": spend.get("answer_hours"),
        "lanes": spend.get("lanes"), "requests": spend.get("full_requests"),
        "recommendation": f"{rec.get('plan')} on {rec.get('offer')}" if rec else None,
        "stop": data.get("stop_kind") or (data.get("stop_reason") or "").split(":")[0],
        "stderr_tail": done.stderr[-600:] if done.returncode else "",
    }  # fmt: skip


def top_functions(prof: Path, top: int) -> list[dict[str, Any]]:
    stats = pstats.Stats(str(prof))
    rows = []
    for (file, line, name), (_, calls, tottime, cumtime, _) in stats.stats.items():  # type: ignore[attr-defined]
        where = os.path.relpath(file, REPO) if file.startswith(str(REPO)) else file
        if ".venv/" in where:
            where = where.split("site-packages/")[-1]
        rows.append({"function": f"{where}:{line}({name})", "calls": calls, "cpu_s": round(tottime, 2),
                     "cumulative_cpu_s": round(cumtime, 2)})  # fmt: skip
    rows.sort(key=lambda r: -r["cpu_s"])
    return [r for r in rows if not _blocked(r["function"])][:top]


def _blocked(function: str) -> bool:
    """A builtin wait: a thread blocked there is not computing, whatever a profiler's clock charged to the call
    (only builtins: a function of ours named _wait_ready or poll_... computes, and is kept)."""
    return function.startswith("~:0(") and any(w in function for w in WAITS)


WAITS = ("time.sleep", "select", "poll", "acquire", "wait", "epoll")


def main() -> None:
    if "--child" in sys.argv:
        at = sys.argv.index("--")
        child(Path(sys.argv[sys.argv.index("--child") + 1]), "--profile" in sys.argv[:at], sys.argv[at + 1 :])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--goal", default=MAIN_GOAL)
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--no-profile", action="store_true", help="only the plain run (no function profile)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        plain = run_once(args.goal, False, tmp)
        profiled = None if args.no_profile else run_once(args.goal, True, tmp)
        top = [] if profiled is None else top_functions(tmp / "profiled.prof", args.top)
    console = Console(width=200)
    table = Table(title="The main job on the twin: the agent's thinking against its waits (one run each)")
    for col in ("run", "exit", "wall s", "agent CPU s", "twins CPU s", "waiting s", "GPU-h", "answer h", "stop"):
        table.add_column(col)
    for label, r in (("plain", plain), ("under cProfile", profiled)):
        if r is not None:
            table.add_row(label, str(r["exit_code"]), f"{r['wall_s']:.1f}", f"{r['agent_cpu_s']:.1f}",
                          f"{r['twins_cpu_s']:.1f}", f"{r['waiting_s']:.1f}", str(r["gpu_hours"]),
                          str(r["answer_hours"]), str(r["stop"]))  # fmt: skip
    console.print(table)
    if top:
        funcs = Table(title=f"Top {len(top)} functions by own CPU time (cProfile, thread CPU clock, every thread)")
        for col in ("function", "calls", "own CPU s", "cumulative CPU s"):
            funcs.add_column(col)
        for f in top:
            funcs.add_row(f["function"], str(f["calls"]), f"{f['cpu_s']:.2f}", f"{f['cumulative_cpu_s']:.2f}")
        console.print(funcs)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(stamped({
        "benchmark": "profile_main_job", "date": time.strftime("%Y-%m-%d"), "goal": args.goal,
        "plain": plain, "profiled": profiled, "top_functions": top,
        "basis": "wall and CPU seconds MEASURED on this machine (one run each); GPU-h, $ and answer hours MODELLED "
                 "by the twin at time scale 300; function times from cProfile on every thread's CPU clock",
    }), indent=2) + "\n")  # fmt: skip
    console.print(f"saved {RESULTS}")


if __name__ == "__main__":
    main()
