"""How well the performance model reproduces every published measurement, and leave-one-out error.

For each cell of REFERENCE.md section 5 (policies/published.yaml): measured, predicted by the
shipped fit, and predicted by a fit made without that cell (leave-one-out). Also the memory and
concurrency checks. Prints a table and saves JSON.

    .venv/bin/python benchmarks/model_accuracy.py [--out benchmarks/results/model_accuracy.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from worldtune.policies import perf_model
from worldtune.policies.calibration import fit_all, fit_published, load_published
from worldtune.tools.models import get_model
from worldtune.tools.plan import Plan
from worldtune.tools.workload import anchor_workload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="benchmarks/results/model_accuracy.json")
    args = parser.parse_args()
    data = load_published()
    profiles = fit_all()
    rows: list[dict[str, Any]] = []
    for cell in data["cells"]:
        label = f"{cell['gpu']} {cell['plan']} {cell['steps']} steps"
        wl = anchor_workload(steps=cell["steps"])
        plan = Plan.parse(cell["plan"])
        predicted = perf_model.predict(wl, plan, profiles[cell["gpu"]]).latency_s
        reference = profiles["H200"] if cell["gpu"] == "B200" else None
        loo_profile = fit_published(cell["gpu"], exclude={label}, reference=reference)
        loo = perf_model.predict(wl, plan, loo_profile).latency_s
        # harder: leave out every step count of the same plan on that GPU
        same_plan = {
            f"{c['gpu']} {c['plan']} {c['steps']} steps"
            for c in data["cells"]
            if c["gpu"] == cell["gpu"] and c["plan"] == cell["plan"]
        }
        lopo = perf_model.predict(wl, plan, fit_published(cell["gpu"], same_plan, reference)).latency_s
        rows.append(
            {
                "cell": label,
                "measured_s": cell["latency_s"],
                "predicted_s": round(predicted, 2),
                "rel_error": round(predicted / cell["latency_s"] - 1, 4),
                "loo_predicted_s": round(loo, 2),
                "loo_rel_error": round(loo / cell["latency_s"] - 1, 4),
                "lopo_predicted_s": round(lopo, 2),
                "lopo_rel_error": round(lopo / cell["latency_s"] - 1, 4),
            }
        )
    memory_rows = []
    for m in data["memory"]:
        wl = anchor_workload()
        plan = Plan.parse(m["plan"])
        gib = perf_model.memory_breakdown(get_model(wl.model), wl, plan, profiles[m["gpu"]]).total_gib
        memory_rows.append(
            {"cell": f"{m['gpu']} {m['plan']}", "measured_gib": m["gib"], "predicted_gib": round(gib, 1),
             "rel_error": round(gib / m["gib"] - 1, 4), "what": m["what"]}
        )  # fmt: skip
    conc_rows = []
    for c in data["concurrency"]:
        wl = anchor_workload(guardrails=True, prompt="a short random prompt of about ten words here")
        p = perf_model.predict(wl, Plan.parse(c["plan"]), profiles[c["gpu"]])
        cph = 3600.0 / (p.latency_s if c["concurrency"] == 1 else p.service_s)
        conc_rows.append(
            {"cell": f"{c['gpu']} {c['plan']} c={c['concurrency']}", "measured_clips_per_hour": c["clips_per_hour"],
             "predicted_clips_per_hour": round(cph, 2), "rel_error": round(cph / c["clips_per_hour"] - 1, 4),
             "measured_mean_latency_s": c["mean_latency_s"],
             "predicted_mean_latency_s": round(perf_model.queued_latency_s(p, c["concurrency"]), 1)}
        )  # fmt: skip
    console = Console(width=160)
    table = Table(title="Latency cells (REFERENCE.md section 5): shipped fit and leave-one-out")
    for col in ("cell", "measured s", "predicted s", "error", "LOO s", "LOO error", "plan-out s", "plan-out error"):
        table.add_column(col, justify="left" if col == "cell" else "right")
    for r in rows:
        table.add_row(
            r["cell"], f"{r['measured_s']:.2f}", f"{r['predicted_s']:.2f}", f"{r['rel_error']:+.2%}",
            f"{r['loo_predicted_s']:.2f}", f"{r['loo_rel_error']:+.2%}",
            f"{r['lopo_predicted_s']:.2f}", f"{r['lopo_rel_error']:+.2%}",
        )  # fmt: skip
    console.print(table)
    mt = Table(title="Peak memory per GPU (checks; memory terms partly assumed)")
    for col in ("cell", "measured GiB", "predicted GiB", "error"):
        mt.add_column(col)
    for r in memory_rows:
        mt.add_row(r["cell"], f"{r['measured_gib']}", f"{r['predicted_gib']}", f"{r['rel_error']:+.1%}")
    console.print(mt)
    ct = Table(title="One 8xH200 server under closed-loop concurrency (guardrails on)")
    for col in ("cell", "measured clips/h", "predicted clips/h", "error", "measured mean s", "predicted mean s"):
        ct.add_column(col)
    for r in conc_rows:
        ct.add_row(
            r["cell"], f"{r['measured_clips_per_hour']}", f"{r['predicted_clips_per_hour']}", f"{r['rel_error']:+.1%}",
            f"{r['measured_mean_latency_s']}", f"{r['predicted_mean_latency_s']}",
        )  # fmt: skip
    console.print(ct)
    worst = max(abs(r["rel_error"]) for r in rows)
    worst_loo = max(abs(r["loo_rel_error"]) for r in rows)
    mean_loo = sum(abs(r["loo_rel_error"]) for r in rows) / len(rows)
    worst_lopo = max(abs(r["lopo_rel_error"]) for r in rows)
    console.print(
        f"max |error| {worst:.2%}; leave-one-out max |error| {worst_loo:.2%}, mean {mean_loo:.2%}; "
        f"leave-one-plan-out max |error| {worst_lopo:.2%}"
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    summary = {
        "max_abs_rel_error": worst,
        "loo_max_abs_rel_error": worst_loo,
        "loo_mean_abs_rel_error": mean_loo,
        "leave_one_plan_out_max_abs_rel_error": worst_lopo,
    }
    out.write_text(
        json.dumps({"latency": rows, "memory": memory_rows, "concurrency": conc_rows, "summary": summary}, indent=2)
    )
    console.print(f"saved {out}")


if __name__ == "__main__":
    main()
