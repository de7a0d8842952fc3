"""The run-to-run spread of the generator's step on a real GPU: repeated steps and repeated short generations at one
shape, cold (the first repetitions of a fresh process) and warm (the later ones), as coefficients of variation.

Device mode needs only PyTorch and the repository's files (a bare GPU node, like benchmarks/generator_step.py):
each of `--procs` fresh processes builds one 1gpu StepRunner (policies/instruments/step_runner.py: the model's
layer shape, `--layers` layers) and times `--gens` short generations of `--steps` steps each, every step with CUDA
events, no warm-up: generation 0 (with step 0) is cold, the rest warm. The parent writes every step's time and
the CVs per condition:

    python3 benchmarks/step_noise.py --sizes sizes.json --procs 3 --layers 2 --steps 8 --gens 5 --out noise.json
    python3 benchmarks/step_noise.py --tiny --device cpu --procs 2 --steps 2 --gens 2 --out t.json   # a dry run

The belief's `noise_cv` is the spread of a request's per-step time (policies/perf_model.noisy_parts), so the
figure it takes is the warm generation's CV (a request's mean step) within a process and across processes.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))  # the benchmarks' helpers, also when run by path
from _run_clock import stamped

REPO = Path(__file__).resolve().parents[1]
try:
    from worldtune.policies.instruments import devkit, step_plan, step_runner
except ImportError:  # a bare GPU node: the repository's files and torch, no worldtune
    sys.path.insert(0, str(REPO / "policies"))
    from instruments import devkit, step_plan, step_runner  # type: ignore[no-redef]

RAW_FORMAT = "worldtune-step-noise/1"


def cv(values: list[float]) -> float | None:
    """Sample standard deviation over the mean (None under two values)."""
    if len(values) < 2:
        return None
    return statistics.stdev(values) / statistics.fmean(values)


def child(args: argparse.Namespace) -> dict[str, Any]:
    """One fresh process: build the runner, time every step of every generation (no warm-up)."""
    began = time.perf_counter()
    torch = devkit.torch_module()
    sizes = devkit.sizes_for(args.sizes_file, "step-tiny" if args.tiny else "full")
    cuda = args.device == "cuda"
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    if cuda:
        devkit.multicast_off()
        torch.cuda.set_device(0)
    dtype = torch.bfloat16 if cuda else torch.float32
    imported = time.perf_counter()
    runner = step_runner.StepRunner(step_plan.parse_plan("1gpu", sizes), sizes, args.layers, 0, device, dtype, {})
    if cuda:
        torch.cuda.synchronize(device)
    built = time.perf_counter()
    gens: list[list[float]] = []
    walls: list[float] = []
    for _ in range(args.gens):
        steps: list[float] = []
        t0 = time.perf_counter()
        for _ in range(args.steps):
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                runner.step()
                end.record()
                torch.cuda.synchronize(device)
                steps.append(start.elapsed_time(end))
            else:
                s0 = time.perf_counter()
                runner.step()
                steps.append((time.perf_counter() - s0) * 1e3)
        walls.append((time.perf_counter() - t0) * 1e3)
        gens.append(steps)
    return {
        "import_s": round(imported - began, 3),
        "build_s": round(built - imported, 3),
        "step_ms": gens,
        "generation_wall_ms": walls,
        "hardware": devkit.hardware(device, 1),
    }


def summarise(procs: list[dict[str, Any]]) -> dict[str, Any]:
    """The CVs per condition: cold = generation 0 (step 0), warm = the later generations (steps)."""
    firsts = [p["step_ms"][0][0] for p in procs]
    cold_gen = [sum(p["step_ms"][0]) for p in procs]
    warm_steps = [[t for g in p["step_ms"][1:] for t in g] for p in procs]
    warm_gens = [[sum(g) for g in p["step_ms"][1:]] for p in procs]
    cold_rest = [t for p in procs for t in p["step_ms"][0][1:]]
    within_step = [c for c in (cv(w) for w in warm_steps) if c is not None]
    within_gen = [c for c in (cv(w) for w in warm_gens) if c is not None]
    warm_step_median = statistics.median(t for w in warm_steps for t in w) if any(warm_steps) else None
    return {
        "cold_first_step_ms": firsts,
        "cold_first_step_over_warm_median": [f / warm_step_median for f in firsts] if warm_step_median else None,
        "cold_step_cv_across_processes": cv(firsts),
        "cold_steps_after_first_cv": cv(cold_rest),
        "cold_generation_ms": cold_gen,
        "cold_generation_cv_across_processes": cv(cold_gen),
        "warm_step_median_ms": warm_step_median,
        "warm_step_cv_within_process": within_step,
        "warm_step_cv_pooled": cv([t for w in warm_steps for t in w]),
        "warm_generation_cv_within_process": within_gen,
        "warm_generation_cv_pooled": cv([t for w in warm_gens for t in w]),
        "warm_generation_mean_ms_per_process": [statistics.fmean(w) for w in warm_gens if w],
        "warm_generation_cv_across_processes": cv([statistics.fmean(w) for w in warm_gens if w]),
    }


def parent(args: argparse.Namespace) -> dict[str, Any]:
    """`--procs` fresh child processes one after another (within `--budget-s`), then the summary."""
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = {
        "format": RAW_FORMAT,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
        "plan": "1gpu",
        "layers": args.layers,
        "steps_per_generation": args.steps,
        "generations_per_process": args.gens,
        "tiny": args.tiny,
        "processes": [],
        "complete": False,
    }
    began = time.perf_counter()
    for index in range(args.procs):
        if index and time.perf_counter() - began > args.budget_s:
            data["stopped"] = f"budget of {args.budget_s} s spent after {index} processes"
            break
        part = out.with_suffix(f".proc{index}.json")
        cmd = [sys.executable, __file__, "--child", "--out", str(part), "--layers", str(args.layers),
               "--steps", str(args.steps), "--gens", str(args.gens), "--device", args.device]  # fmt: skip
        cmd += ["--tiny"] if args.tiny else []
        cmd += ["--sizes", args.sizes_file] if args.sizes_file else []
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True)
        record = json.loads(part.read_text())
        part.unlink()
        record["process_wall_s"] = round(time.perf_counter() - t0, 3)
        data["processes"].append(record)
        first = record["step_ms"][0][0]
        gens = [round(sum(g), 1) for g in record["step_ms"]]
        print(f"process {index}: import {record['import_s']} s, build {record['build_s']} s, first step "
              f"{first:.1f} ms, generations (ms) {gens}", flush=True)  # fmt: skip
        devkit.write_json(out, data)
    data["summary"] = summarise(data["processes"])
    data["complete"] = True
    devkit.write_json(out, stamped(data))
    for key, value in data["summary"].items():
        print(f"  {key}: {value}", flush=True)
    print(f"wrote {out}", flush=True)
    return data


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", required=True, help="raw JSON file to write")
    parser.add_argument("--sizes", dest="sizes_file", help="a sizes file (model_sizes.py); default: the model itself")
    parser.add_argument("--procs", type=int, default=3, help="fresh processes, one after another")
    parser.add_argument("--layers", type=int, default=2, help="layers per step (a reduced layer count)")
    parser.add_argument("--steps", type=int, default=8, help="steps per short generation")
    parser.add_argument("--gens", type=int, default=5, help="short generations per process (the first is cold)")
    parser.add_argument("--budget-s", type=float, default=240.0, help="start no further process after this long")
    parser.add_argument("--tiny", action="store_true", help="toy shapes (CPU tests)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name in ("procs", "layers", "steps", "gens"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}={getattr(args, name)}: expected 1 or more")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        devkit.write_json(Path(args.out), child(args))
        return 0
    parent(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
