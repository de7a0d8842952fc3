"""The measured H200 profiles against the published cells, the single-GPU floor and the shipped fitted profile.

Reads the committed raw micro-benchmark files (policies/profiles/measured/*.raw.json, made by
`worldtune calibrate` on lent H200s), turns each into a Profile exactly as the CLI does, and prints:
the measured rates and link numbers next to the shipped profile's; the single-GPU per-step that the
anchor-size timings imply (and the model's) against REFERENCE.md's 23.3 s floor; the model's error on
every published H200 cell when it starts from each profile; and the raw timings behind them.

    .venv/bin/python benchmarks/calibration_compare.py [--out benchmarks/results/calibration_compare.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from worldtune.policies import gpu_calibration as gc
from worldtune.policies.calibration import shipped_profile

sys.path.insert(0, str(Path(__file__).parent))  # the benchmarks' helpers, also when run by path
from _run_clock import stamped

MEASURED = Path(__file__).resolve().parents[1] / "policies" / "profiles" / "measured"
FIELDS = (*gc.COMPUTE_FIELDS, *gc.COLLECTIVE_FIELDS)


def _f(value: Any, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="benchmarks/results/calibration_compare.json")
    parser.add_argument("--gpu", default="H200")
    args = parser.parse_args()
    console = Console(width=260)  # up to five profiles side by side
    shipped = shipped_profile(args.gpu)
    runs: dict[str, Any] = {}
    for path in sorted(MEASURED.glob(f"{args.gpu}-*gpu-*.raw.json")):
        raw = gc.load_raw(path)
        profile = gc.measured_profile(raw, args.gpu, raw_name=path.name)
        runs[path.name.removesuffix(".raw.json")] = {"raw": raw, "profile": profile, "cmp": gc.comparison(profile, raw)}
    if not runs:
        console.print(f"no measured {args.gpu} raw files under {MEASURED}")
        return
    columns = {"shipped (fit to published)": gc.comparison(shipped), **{k: v["cmp"] for k, v in runs.items()}}
    _print_comparison(console, args.gpu, columns)
    for name, run in runs.items():
        _print_raw(console, name, run)

    result = {
        "gpu": args.gpu,
        "columns": columns,
        "fit_cells": {name: run["profile"].fit.get("cells", []) for name, run in runs.items()},
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(stamped(result), indent=2, default=str) + "\n")
    console.print(f"saved {args.out}")


def _print_comparison(console: Console, gpu: str, columns: dict[str, Any]) -> None:
    """The rates, the single-GPU per step and the published cells, one column per profile."""
    rates = Table(title=f"{gpu}: measured profiles vs the shipped fit")
    rates.add_column("field")
    for name in columns:
        rates.add_column(name, justify="right")
    for field in FIELDS:
        rates.add_row(field, *(_f(c["rates"][field], 2) for c in columns.values()))
    console.print(rates)

    step = Table(title="single-GPU per step (anchor: 44,160 tokens x 2 CFG branches x 64 layers)")
    for name in ("profile", "linear ms/layer", "attention ms/layer", "measured ops s/step", "model s/step", "floor"):
        step.add_column(name, justify="left" if name == "profile" else "right")
    for name, c in columns.items():
        m = c.get("measured_single_gpu_step") or {}
        step.add_row(name, _f(m.get("linear_ms"), 2), _f(m.get("attention_ms"), 2), _f(m.get("per_step_s"), 2),
                     _f(c["model_single_gpu_step"]["per_step_s"], 2), _f(c["floor_step_s"], 2))  # fmt: skip
    console.print(step)

    cells = Table(
        title="model vs published H200 cells (REFERENCE.md sections 5, 8): latency s (error) | per step s (error)"
    )
    cells.add_column("cell")
    cells.add_column("published", justify="right")
    for name in columns:
        cells.add_column(name, justify="right")
    for i, row in enumerate(columns["shipped (fit to published)"]["cells"]):
        published = f"{row['published_s']:.1f} | {_f(row['published_step_s'], 3)}"
        entries = []
        for c in columns.values():
            r = c["cells"][i]
            latency = f"{r['predicted_s']:.1f} ({r['rel_error']:+.1%})"
            step_error = "-" if r["step_rel_error"] is None else f"{r['step_rel_error']:+.1%}"  # one step count
            entries.append(f"{latency} | {r['predicted_step_s']:.3f} ({step_error})")
        cells.add_row(row["cell"], published, *entries)
    console.print(cells)


def _print_raw(console: Console, name: str, run: dict[str, Any]) -> None:
    """One measured run's raw timings (and NCCL collectives, if it ran any) and its hardware line."""
    raw = run["raw"]
    ops = Table(title=f"{name}: raw timings (median of {raw['ops'][0]['reps']} after warm-up; CUDA events)")
    for col in ("op", "tokens", "median ms", "TFLOP/s", "note"):
        ops.add_column(col, justify="left" if col in ("op", "note") else "right")
    for op in raw["ops"]:
        if "error" in op:
            ops.add_row(op["name"], "", "", "", op["error"][:60])
            continue
        if op["op"] == "attention" and op["tokens"] < 5000:
            continue  # the small end of the sweep is in the JSON
        note = op.get("backend", "") or (f"tp{op['tp']}" if op.get("tp", 1) > 1 else "")
        if op["op"] == "ceiling" and "gbps" in op:
            note = f"{op['gbps']:.0f} GB/s read+write"
        ops.add_row(op["name"], str(op["tokens"]), _f(op["median_ms"], 3), _f(op["tflops"]), note)
    console.print(ops)
    if raw.get("collectives"):
        coll = Table(title=f"{name}: NCCL collectives on {raw['hardware']['world']} GPUs (slowest rank)")
        for col in ("case", "scheme", "MB per rank", "time us", "bus GB/s"):
            coll.add_column(col, justify="left" if col in ("case", "scheme") else "right")
        for c in raw["collectives"]:
            if c["scheme"] == "size sweep" and c["buffer_bytes"] < 2**24:
                continue
            coll.add_row(c["name"], c["scheme"], _f(c["buffer_bytes"] / 1e6, 2), _f(c["median_ms"] * 1e3),
                         _f(c["busbw_gbps"]))  # fmt: skip
        console.print(coll)
    console.print(f"[dim]{run['profile'].hardware}[/]")


if __name__ == "__main__":
    main()
