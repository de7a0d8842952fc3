"""The main job's time to a verified answer (issue 25): the claim sized to the goal, its run in lanes, stopped once
decided; before and after, on the embedded default.

    .venv/bin/python benchmarks/main_job.py                       # after (this code); before from the saved JSON
    .venv/bin/python benchmarks/main_job.py --before-bin PATH      # also run `before` with another checkout's
                                                                  # worldtune (e.g. main's .venv/bin/worldtune)

Each row is one `worldtune tune GOAL --yes --json` run on the embedded default (infra local, engine twin, time
scale 300): the main job, the main job at 99% confidence, and the main job with `answer within 2 hours` and with
`answer within 30 minutes` (each met, or refused before any spend). What each figure is:
- GPU-h, $, time to answer: MODELLED (the twin's model-seconds x the offer's price and GPU count; provisioning is
  the offer's modelled seconds; loads as the twin serves them); no GPU was rented;
- lanes, requests (the full runs' samples), recommendation, stop: COUNTED from the run's record.
Prints a table and saves benchmarks/results/main_job.json.
"""

from __future__ import annotations

import argparse
import json
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

RESULTS = Path(__file__).parent / "results" / "main_job.json"
WORLDTUNE = str(Path(sys.executable).parent / "worldtune")
MAIN_GOAL = (
    "Cosmos3-Super, 720p 189-frame clips, p95 under 150 s, cheapest per clip, H200 or B200, spot ok, budget $300"
)
ROWS = {
    "main job": MAIN_GOAL,
    "main job at 99% confidence": MAIN_GOAL + ", at 99% confidence",
    "main job, answer within 2 hours": MAIN_GOAL + ", answer within 2 hours",
    "main job, answer within 30 minutes": MAIN_GOAL + ", answer within 30 minutes",
}


def tune(binary: str, goal: str) -> dict[str, Any]:
    """One graph run on the twin: its spend, lanes, requests, recommendation and stop, from its record."""
    with tempfile.TemporaryDirectory() as tmp:
        started = time.time()
        out = subprocess.run([binary, "tune", goal, "--yes", "--json", "--db", str(Path(tmp) / "wt.db")],
                             capture_output=True, text=True, timeout=1800, stdin=subprocess.DEVNULL)  # fmt: skip
        wall = time.time() - started
    if not out.stdout.strip():
        return {"error": out.stderr[-2000:], "exit_code": out.returncode}
    data = json.loads(out.stdout)
    spend = data.get("spend") or {}
    rec = data.get("recommendation") or {}
    return {
        "exit_code": out.returncode,
        "gpu_hours": spend.get("gpu_hours"),
        "usd": spend.get("usd"),
        "answer_hours": spend.get("answer_hours"),
        "lanes": spend.get("lanes", 1),  # the record before issue 25 had one lane and no such key
        "requests": spend.get("full_requests") or _claimed_n(data.get("stop_reason") or ""),
        "confidence": (data.get("goal") or {}).get("confidence", 0.99),
        "recommendation": f"{rec.get('plan')} on {rec.get('offer')}" if rec else None,
        "stop_kind": data.get("stop_kind") or (data.get("stop_reason") or "").split(":")[0],
        "stop_reason": (data.get("stop_reason") or "")[:400],
        "wall_s": round(wall, 1),
    }


def _claimed_n(stop_reason: str) -> int | None:
    """A record from before issue 25 has no request count: the claim's n, as its stop reason says it."""
    import re

    found = re.search(r"n=(\d+)", stop_reason)
    return int(found.group(1)) if found else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before-bin", help="a worldtune executable of the code before (runs the main job with it)")
    parser.add_argument("--rows", nargs="*", default=list(ROWS), help="which rows to run (default: all)")
    args = parser.parse_args()
    saved = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    before = tune(args.before_bin, MAIN_GOAL) | {"code": args.before_bin} if args.before_bin else saved.get("before")
    # rows not run this time keep their saved figures (each row says when it ran)
    after = {k: v for k, v in (saved.get("after") or {}).items() if k in ROWS}
    after |= {name: tune(WORLDTUNE, ROWS[name]) | {"ran": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
              for name in args.rows}  # fmt: skip
    table = Table(title="main job on the twin: time to a verified answer (modelled), before and after issue 25")
    for col in ("run", "GPU-h", "$", "answer h", "lanes", "requests", "confidence", "stop", "recommendation"):
        table.add_column(col)
    rows = ([("before: main job", before)] if before else []) + [(f"after: {k}", v) for k, v in after.items()]
    for name, r in rows:
        table.add_row(name, *(str(r.get(k)) for k in ("gpu_hours", "usd", "answer_hours", "lanes", "requests",
                                                       "confidence", "stop_kind", "recommendation")))  # fmt: skip
    Console().print(table)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(stamped({
        "before": before, "after": after, "measured": "counts (lanes, requests, recommendation, stop) from the records",
        "simulated": "the twin served every request; GPU-h, $ and time to answer are modelled from its model-seconds",
        "command": " ".join(["benchmarks/main_job.py", *sys.argv[1:]]),
        "before_from": "main at 3d0b4be, run with --before-bin /work/main/.venv/bin/worldtune",
    }), indent=2) + "\n")  # fmt: skip


if __name__ == "__main__":
    main()
