"""Quick rehearsal: worldtune's search alone on rehearsal truths, against the grid's cost on each.

    .venv/bin/python benchmarks/rehearsal_quick.py [TRUTHS] [SEEDS] [--truth-seed S]

The truths are benchmarks/rehearsal.py's (the two named ones and TRUTHS drawn around the belief with the
generator seeded by S; the default 7 gives rehearsal.py's own, any other S truths that no tuning of the search
has seen). Per run: how the search stopped, its regret against the truth's optimum, its GPU-hours as a share of
the grid's (every candidate on a fresh deployment) and over an oracle's (one provisioning, one load and the claim's
run of the true best plan, with the lanes the search's claim took; feasible truths only), the modelled time to its
verdict, its probes and full runs. Measurements are SIMULATED as the
twin serves them (perf_model.predict on the truth with seeded noise; benchmarks/search_efficiency.py's Twin).
Prints a table and saves benchmarks/results/rehearsal_quick-seed<S>.json.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).parent))
import rehearsal
import search_efficiency as se

RESULTS = Path(__file__).parent / "results"


def run(truths: int, seeds: int, truth_seed: int) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    started = time.time()
    for scenario, goal in rehearsal.truths(truths, seed=truth_seed):
        grid = se.run_grid(scenario, goal, 0)
        feasible = any(ok for _, ok in se.truth_table(scenario, goal).values())
        for seed in range(seeds):
            w = se.run_worldtune(scenario, goal, seed)
            rows.append({
                "truth": scenario.name, "seed": seed, "feasible": feasible, "stop": w.stop, "regret": w.regret,
                "share_of_grid": w.total_gpu_hours / grid.total_gpu_hours, "gpu_hours": w.total_gpu_hours,
                "probes": w.extra["probes"], "full_runs": w.extra["full_runs"],
                **rehearsal.against_oracle(scenario, goal, w),
            })  # fmt: skip
            print(f"{scenario.name} seed {seed}: {rows[-1]}", file=sys.stderr)
    feasible_rows = [r for r in rows if r["feasible"]]
    regrets = [r["regret"] if r["regret"] is not None else np.inf for r in feasible_rows]
    summary = {
        "runs": len(rows),
        "feasible_runs": len(feasible_rows),
        "share_regret_le_5pct": float(np.mean([x <= 0.05 for x in regrets])) if regrets else None,
        "converged_with_regret_gt_5pct": sum(
            1 for r in feasible_rows if r["stop"] == "converged" and (r["regret"] is None or r["regret"] > 0.05)
        ),
        "infeasible_runs": sum(1 for r in rows if not r["feasible"]),
        "infeasible_detected": sum(1 for r in rows if not r["feasible"] and r["stop"] == "infeasible"),
        "share_of_grid_p50": float(np.median([r["share_of_grid"] for r in rows])),
        **rehearsal.oracle_summary(rows),
        "probes_p50": float(np.median([r["probes"] for r in rows])),
        "full_runs_p50": float(np.median([r["full_runs"] for r in rows])),
        "stops": {k: sum(1 for r in rows if r["stop"] == k) for k in sorted({r["stop"] for r in rows})},
    }
    return {
        "benchmark": "rehearsal_quick", "date": time.strftime("%Y-%m-%d"), "truths": truths, "seeds": seeds,
        "truth_seed": truth_seed, "measurement": "simulated (the twin's timing model on each truth, seeded noise)",
        "summary": summary, "rows": rows, "elapsed_s": round(time.time() - started, 1),
    }  # fmt: skip


def main() -> None:
    args = sys.argv[1:]
    truth_seed = 7
    if "--truth-seed" in args:
        i = args.index("--truth-seed")
        truth_seed = int(args[i + 1])
        del args[i : i + 2]
    truths = int(args[0]) if args else 40
    seeds = int(args[1]) if len(args) > 1 else 1
    record = run(truths, seeds, truth_seed)
    s = record["summary"]
    table = Table(title=f"Quick rehearsal: worldtune on {s['runs']} runs (truth seed {truth_seed}; simulated)")
    for column in ("runs", "regret <= 5%", "converged, regret > 5%", "infeasible found", "GPU-h / grid p50",
                   *rehearsal.ORACLE_COLUMNS, "probes p50", "full runs p50", "stops"):  # fmt: skip
        table.add_column(column)
    table.add_row(
        str(s["runs"]), f"{s['share_regret_le_5pct']:.0%}", str(s["converged_with_regret_gt_5pct"]),
        f"{s['infeasible_detected']} / {s['infeasible_runs']}", f"{s['share_of_grid_p50']:.2%}",
        *rehearsal.oracle_cells(s), f"{s['probes_p50']:g}", f"{s['full_runs_p50']:g}",
        ", ".join(f"{k} {v}" for k, v in s["stops"].items()),
    )  # fmt: skip
    Console().print(table)
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"rehearsal_quick-seed{truth_seed}.json"
    out.write_text(json.dumps(record, indent=2, default=str))
    print(f"saved {out}")


if __name__ == "__main__":
    main()
