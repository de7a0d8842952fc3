"""One denoising step of the Cosmos3-Super generator under a parallel plan, in PyTorch, timed on real GPUs.

The instrument is policies/instruments/generator_step.py (with step_plan.py, step_runner.py): random BF16 weights
in the model's shapes (hidden 5120, 64 query heads x 128, 8 KV heads, SwiGLU FFN 25600), 44,160 video tokens
per CFG branch attending jointly to themselves and the 4,096 prompt tokens through SDPA's cuDNN backend, and the
plans 1gpu, cfgN, uN (Ulysses), tpN (Megatron) and hsdpN composed as vLLM-Omni composes them (cfg2-u4-hsdp8,
tp4-cfg2, ...). This script is its command line. Device mode needs only PyTorch and the repository's files (a
bare GPU node); there the shapes and plans come from a sizes file made where worldtune is installed
(`.venv/bin/python -m worldtune.policies.instruments.model_sizes --out sizes.json`), elsewhere from the model:

    python3 benchmarks/generator_step.py --world 2 --plans 1gpu,cfg2,u2,tp2,cfg2-hsdp2 --layers 8 --out raw.json
    python3 benchmarks/generator_step.py --world 4 --plans cfg2-u2,tp4 --tiny --device cpu --check --out t.json
    python3 benchmarks/generator_step.py --sizes sizes.json --world 8 --plans cfg2-u4-hsdp8,tp8 --out raw.json

--check compares every plan's guided prediction with a one-process reference computed from the same seeds.
Compare mode (here, with worldtune installed): the measured steps against the performance model's prediction
for the same plan with a measured profile, and the published 8xH200 cells (policies/instruments/step_compare.py):

    .venv/bin/python benchmarks/generator_step.py --compare raw.json [...] \\
        [--profile policies/profiles/measured/H200-2gpu-2026-11-29.yaml] \\
        [--results benchmarks/results/generator_step.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))  # the benchmarks' helpers, also when run by path
from _run_clock import stamped

REPO = Path(__file__).resolve().parents[1]
try:
    from worldtune.policies.instruments import devkit, step_plan, step_runner
    from worldtune.policies.instruments import generator_step as step
except ImportError:  # a bare GPU node: the repository's files and torch, no worldtune
    sys.path.insert(0, str(REPO / "policies"))
    from instruments import devkit, step_plan, step_runner
    from instruments import generator_step as step


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", help="raw JSON file to write (device mode)")
    parser.add_argument("--sizes", dest="sizes_file", help="a sizes file (model_sizes.py); default: the model itself")
    parser.add_argument("--world", type=int, default=1, help="processes (GPUs); a plan runs on the first ranks")
    parser.add_argument("--plans", default="1gpu", help="comma-separated plans, e.g. 1gpu,cfg2,u2,tp2,cfg2-hsdp2")
    parser.add_argument("--layers", type=int, default=64, help="layers per step (the time is scaled to 64)")
    parser.add_argument("--tiny", action="store_true", help="toy shapes (CPU tests)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--warmup", type=int, default=None, help="untimed steps (default 2 GPU, 1 CPU)")
    parser.add_argument("--reps", type=int, default=None, help="timed steps (default 5 GPU, 2 CPU)")
    parser.add_argument("--check", action="store_true", help="compare each plan's output with one process")
    parser.add_argument("--attention-backend", choices=sorted(step_runner.BACKENDS), default="cudnn")
    parser.add_argument("--timeout-s", type=int, default=300, help="a stuck collective fails after this long")
    parser.add_argument("--compare", nargs="+", metavar="RAW", help="compare raw files with the model (here)")
    parser.add_argument("--profile", default=str(REPO / "policies/profiles/measured/H200-2gpu-2026-11-29.yaml"))
    parser.add_argument("--results", default=str(REPO / "benchmarks/results/generator_step.json"))
    parser.add_argument("--microbench", help="compare mode: a microbench raw file (with --groups) to show beside")
    args = parser.parse_args(argv)
    if args.compare:
        return args
    if not args.out:
        parser.error("--out: required in device mode (the raw JSON file to write)")
    try:
        args.sizes = devkit.sizes_for(args.sizes_file, "step-tiny" if args.tiny else "full")
    except (OSError, ValueError, KeyError) as exc:
        parser.error(f"--sizes {args.sizes_file}: {exc}")
    try:
        args.plans = [step_plan.parse_plan(text, args.sizes) for text in args.plans.split(",")]
    except ValueError as exc:
        parser.error(str(exc))
    if args.layers < 1:
        parser.error(f"--layers={args.layers}: expected 1 or more")
    if args.world < 1:
        parser.error(f"--world={args.world}: expected 1 or more processes")
    for plan in args.plans:
        if plan.world > args.world:
            parser.error(f"--plans {plan.name}: needs {plan.world} ranks, --world is {args.world}")
    cpu = args.device == "cpu"
    args.warmup = args.warmup if args.warmup is not None else (1 if cpu else 2)
    args.reps = args.reps if args.reps is not None else (2 if cpu else 5)
    if args.reps < 1:
        parser.error(f"--reps={args.reps}: expected 1 or more")
    if not cpu:
        torch = devkit.torch_module()
        if not torch.cuda.is_available():
            parser.error("--device cuda: no CUDA GPU is visible to torch (use --device cpu --tiny for a dry run)")
        if args.world > torch.cuda.device_count():
            parser.error(f"--world={args.world}: only {torch.cuda.device_count()} GPUs are visible")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.compare:
        compare(
            args.compare, Path(args.profile), Path(args.results), Path(args.microbench) if args.microbench else None
        )
        return 0
    step.run(args)
    return 0


# ---- compare mode (here, with worldtune) --------------------------------------------------------------------
def compare(
    raw_paths: list[str], profile_path: Path, results: Path, microbench_path: Path | None = None
) -> dict[str, Any]:
    """Print the comparison table and save it as JSON."""
    from rich.console import Console
    from rich.table import Table

    from worldtune.policies.instruments import step_compare

    raws = step_compare.load_raws(raw_paths)
    microbench = json.loads(microbench_path.read_text()) if microbench_path else None
    result = step_compare.comparison_rows(raws, profile_path, microbench)
    result["raw_files"] = [str(Path(p).name) for p in raw_paths]
    result["microbench_file"] = microbench_path.name if microbench_path else None
    console = Console(width=200)
    table = Table(title=f"one denoising step, per-step scaled to 64 layers; model: {result['profile']}")
    bw_col = "bus GB/s: in the step (alone)"
    for name in ("plan", "GPUs", "layers run", bw_col, "model s/step", "published s/step", "measured s/step",
                 "model err", "comm s/step"):  # fmt: skip
        table.add_column(name, justify="left" if name in ("plan", bw_col) else "right")

    def f(value: Any, digits: int = 3) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    for r in result["rows"]:
        alone = r["isolated_busbw_gbps"]
        bw = (
            ", ".join(
                f"{k.split('_')[0]} {v:.0f}" + (f" ({alone[k]:.0f})" if alone.get(k) is not None else "")
                for k, v in r["measured_busbw_gbps"].items()
                if k in step_compare.DEGREE
            )
            or "-"
        )
        table.add_row(r["plan"] + (" (toy)" if r["toy"] else ""), str(r["world"]), str(r["layers"]), bw,
                      f(r["model_compute_comm_s"]), f(r["published_per_step_s"], 2), f(r["measured_per_step_s"]),
                      "-" if r["model_rel_error"] is None else f"{r['model_rel_error']:+.1%}",
                      f(r["measured_exposed_comm_s"]))  # fmt: skip
    for r in result["not_run"]:
        table.add_row(r["plan"], "8", "not run", "-", f(r["model_compute_comm_s"]), f(r["published_per_step_s"], 2),
                      "-", "-", "-")  # fmt: skip
    console.print(table)
    console.print(
        "[dim]model s/step: perf_model.step_breakdown (compute + communication, without the profile's "
        "per-step scheduler overhead, which this benchmark has no part of); model err = model / measured - 1; "
        "bus GB/s in the step: the rank that waited least (the collective's own time); (alone): the microbench "
        "at the same per-layer size in groups of the scheme's degree; comm s/step: the collectives that stop the "
        "step (not the HSDP gather, which runs under the compute), scaled to 64 layers[/]"
    )
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(json.dumps(stamped(result), indent=2, default=str) + "\n")
    console.print(f"saved {results}")
    return result


if __name__ == "__main__":
    sys.exit(main())
