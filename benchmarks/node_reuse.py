"""Node reuse (issue 18): the main job with and without keeping the node between candidates, and its rehearsals.

    .venv/bin/python benchmarks/node_reuse.py            # main job, both ways, through the real graph on the twin
    .venv/bin/python benchmarks/node_reuse.py --truths 1  # and the first named rehearsal truths, both ways

Each row is one `worldtune tune GOAL --yes --json` run on the embedded default (infra local, engine twin, time
scale 300), with `--no-reuse-nodes` (before: a new deployment per candidate) and with node reuse (after: the
next candidate on a held node of the same offer is a replan with a warm load). What each figure is:
- GPU-h, $, time to answer: MODELLED (the twin's model-seconds x the offer's price and GPU count; provisioning
  is the offer's modelled seconds; loads as the twin serves them: cold on a new node, warm after a replan);
  no GPU was rented;
- deployments, loads, measurements, recommendation: COUNTED from the run's record;
- the spend estimate columns: MODELLED before approval (policies/search/nodes.py), nothing run.
Prints a table and saves benchmarks/results/node_reuse.json.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _run_clock import stamped
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).parent))

RESULTS = Path(__file__).parent / "results" / "node_reuse.json"
MAIN_GOAL = (
    "Cosmos3-Super, 720p 189-frame clips, p95 under 150 s, cheapest per clip, H200 or B200, spot ok, budget $300"
)
ISSUE_BEFORE = {"gpu_hours": 18.0, "usd": 26.0, "answer_hours": 2.3, "source": "issue 18's quoted figures (not rerun)"}


def tune(goal: str, reuse: bool, truth: dict[str, Any] | None = None) -> dict[str, Any]:
    """One graph run on the twin; its spend, counts and recommendation."""
    worldtune = str(Path(sys.executable).parent / "worldtune")
    with tempfile.TemporaryDirectory() as tmp:
        argv = [worldtune, "tune", goal, "--yes", "--json", "--db", str(Path(tmp) / "wt.db"),
                "--reuse-nodes" if reuse else "--no-reuse-nodes"]  # fmt: skip
        if truth:
            folder = Path(tmp) / "truth"
            folder.mkdir()
            for gpu, profile in truth.items():
                profile.dump(folder / f"{gpu}.yaml")
            argv += ["--twin-profile", str(folder)]
        started = time.time()
        out = subprocess.run(argv, capture_output=True, text=True, timeout=1800, stdin=subprocess.DEVNULL)
        wall = time.time() - started
    data = json.loads(out.stdout) if out.stdout.strip().startswith("{") else {}
    spend = data.get("spend") or {}
    estimate = data.get("spend_estimate") or {}
    return {
        "reuse_nodes": reuse, "exit": out.returncode, "stop": data.get("stop_kind"),
        "recommendation": (data.get("recommendation") or {}).get("key"),
        "gpu_hours": spend.get("gpu_hours"), "usd": spend.get("usd"), "answer_hours": spend.get("answer_hours"),
        "deployments": spend.get("deployments"), "measurements": spend.get("benchmarks"),
        "replans": spend.get("replans"), "estimate_gpu_hours": estimate.get("gpu_hours"),
        "estimate_usd": estimate.get("usd"),
        "estimate_answer_hours": estimate.get("answer_hours"), "wall_s": round(wall, 1),
    }  # fmt: skip


def main() -> None:
    truths_n = int(sys.argv[sys.argv.index("--truths") + 1]) if "--truths" in sys.argv else 0
    rows: list[dict[str, Any]] = []
    for reuse in (False, True):
        rows.append({"job": "main job", **tune(MAIN_GOAL, reuse)})
        print(f"main job reuse={reuse}: {rows[-1]}", file=sys.stderr)
    if truths_n:
        import rehearsal

        for scenario, goal in rehearsal.truths(0)[:truths_n]:
            for reuse in (False, True):
                rows.append({"job": scenario.name, **tune(rehearsal._goal_text(goal), reuse, scenario.truth)})
                print(f"{scenario.name} reuse={reuse}: {rows[-1]}", file=sys.stderr)
    table = Table(title="Node reuse on the twin (modelled GPU time; counts from each run's record)")
    for c in ("job", "reuse", "GPU-h", "$", "answer h", "deployments", "replans", "measurements", "est. GPU-h",
              "est. answer h", "recommendation"):  # fmt: skip
        table.add_column(c)
    for r in rows:
        table.add_row(r["job"], str(r["reuse_nodes"]), f"{r['gpu_hours']}", f"{r['usd']}", f"{r['answer_hours']}",
                      f"{r['deployments']}", f"{r['replans']}", f"{r['measurements']}", f"{r['estimate_gpu_hours']}",
                      f"{r['estimate_answer_hours']}", str(r["recommendation"]))  # fmt: skip
    Console(width=240).print(table)
    before, after = rows[0], rows[1]
    change = {
        k: (after[k] / before[k] - 1) if before.get(k) and after.get(k) is not None else None
        for k in ("gpu_hours", "usd", "answer_hours", "deployments")
    }
    print("main job, after vs before: " + ", ".join(f"{k} {v:+.0%}" for k, v in change.items() if v is not None))
    RESULTS.write_text(json.dumps(stamped({
        "benchmark": "node_reuse", "date": time.strftime("%Y-%m-%d"), "goal": MAIN_GOAL, "rows": rows,
        "main_change": change, "issue_before": ISSUE_BEFORE,
        "basis": "modelled: GPU-h, $ and answer hours are the twin's model-seconds x offer price/GPUs (time scale 300, "
                 "no GPU rented); counts are from the run records; estimates are policies/search/nodes.py before "
                 "approval",
    }), indent=2, default=str))  # fmt: skip
    print(f"saved {RESULTS}")


if __name__ == "__main__":
    main()
