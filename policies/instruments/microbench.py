"""GPU micro-benchmarks of the generator's own operations: the raw data `worldtune calibrate` turns into a Profile.

Runs on a GPU node: PyTorch and the standard library. Where worldtune is installed it reads the sizes from the
model; on a bare node it takes them from a sizes file made where worldtune is (model_sizes.py beside this file):

    python3 policies/instruments/microbench.py --out raw.json [--world N [--groups 4,2]] [--tiny] [--device cpu|cuda]
    python3 policies/instruments/microbench.py --sizes sizes.json --out raw.json ...   # a bare GPU node

With random BF16 weights in the model's layer shape (Cosmos3-Super: 64 layers, hidden 5120, 64 query heads x
128, 8 KV heads, SwiGLU FFN 25600) it times, with CUDA events after warm-up (micro_ops.py):
- one layer's linear layers (fused q/k/v projection, output projection, fused SwiGLU gate/up + down) at the
  workload's token count (44,160 per CFG branch at 720p x 189 frames) and at its halvings, so the
  rate-versus-size curve can be fitted; also tensor-parallel weight shards at the full token count;
- attention (torch SDPA) of those token counts against all keys including the 4,096 prompt tokens, the
  per-GPU shapes of Ulysses (all tokens, heads/U) and ring (tokens/R queries, all keys), and the SDPA
  backends at the anchor shape;
and with 2+ GPUs (one process a GPU, NCCL; micro_comm.py) all-to-all, all-reduce and all-gather at the
per-layer sizes the Ulysses, TP, HSDP and CFG schemes move (perf_model's byte formulas, through the sizes), a
size sweep and a small-size latency probe; with --groups G also inside world/G concurrent sub-groups of G ranks
(dist.new_group), as a plan runs them. It records the hardware and library versions and writes raw JSON after
every section (partial results survive a timeout). policies/gpu_calibration.py fits a Profile to that file.
With --mechanisms it then runs mechbench.py (ring chunked attention + LSE merge, Ulysses packing, FP8 GEMM,
every SDPA backend, the VAE decode and its tiles) into OUT's .mech.json.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

if not __package__:  # run as a file (a bare GPU node): this folder is the package `instruments`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "instruments"

from . import devkit
from .devkit import MULTICAST_OFF_ENV, torch_module
from .micro_comm import (
    cfg_gather_bytes,
    check_collectives,
    collective_cases,
    group_cases,
    hsdp_gather_bytes,
    run_collectives,
    slowest,
    sub_groups,
    tp_allreduce_bytes,
    ulysses_bytes,
)
from .micro_ops import HALVINGS, Bench, attention_flops, linear_flops, token_sweep
from .shapes import SP_DEGREES, Sizes, record

# the micro-benchmark's face: what `worldtune calibrate`, policies/gpu_calibration.py and the tests read
__all__ = [
    "HALVINGS",
    "MULTICAST_OFF_ENV",
    "RAW_FORMAT",
    "SP_DEGREES",
    "attention_flops",
    "cfg_gather_bytes",
    "collective_cases",
    "group_cases",
    "hsdp_gather_bytes",
    "linear_flops",
    "main",
    "mechanisms_path",
    "sub_groups",
    "token_sweep",
    "tp_allreduce_bytes",
    "ulysses_bytes",
]
RAW_FORMAT = "worldtune-gpu-microbench/1"


def __getattr__(name: str) -> Sizes:
    """FULL and TINY: the model's sizes (at the anchor; the toy), read when first asked for (PEP 562)."""
    if name in ("FULL", "TINY"):
        return devkit.sizes_for(None, "tiny" if name == "TINY" else "full")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _worker(rank: int, args: argparse.Namespace, port: int) -> None:
    torch, dist = torch_module(), torch_module("distributed")

    world, sizes = args.world, args.sizes
    # torch >= 2.13 renames all_gather_into_tensor; the old name is what GPU images with 2.11 have
    warnings.filterwarnings("ignore", message=".*all_gather_into_tensor.*", category=FutureWarning)
    if args.device == "cuda":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(max(1, (os.cpu_count() or 2) // world))
    if world > 1:
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(
            backend,
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world,
            device_id=device if device.type == "cuda" else None,
        )
    torch.manual_seed(17 + rank)
    out = Path(args.out)
    started = time.time()
    data: dict[str, Any] = {
        "format": RAW_FORMAT,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "tiny": sizes.tiny,
        "sizes": record(sizes),
        "command": " ".join(sys.argv),
        "hardware": devkit.hardware(device, world),
        "ops": [],
        "ops_other_ranks": [],
        "collectives": [],
        "complete": False,
    }
    bench = Bench(sizes, device, args.warmup, args.reps)
    say = print if rank == 0 else (lambda *a, **k: None)
    if not args.skip_compute:
        say("== ceilings", flush=True)
        bench.ceilings()
        say("== linear layers", flush=True)
        bench.linear()
        if rank == 0:
            data["ops"] = bench.records
            devkit.write_json(out, data)
        say("== attention", flush=True)
        data["attention_backend"] = bench.attention()
        data["attention_check_rel_err"] = bench.attention_error
        data["ops"] = bench.records
    data["compute_s"] = round(time.time() - started, 1)
    if rank == 0:
        devkit.write_json(out, data)
    if world > 1:
        _collectives(rank, args, device, bench, data)
    data["complete"] = True
    data["total_s"] = round(time.time() - started, 1)
    if rank == 0:
        devkit.write_json(out, data)
        print(f"wrote {out} ({data['total_s']} s)", flush=True)


def _collectives(rank: int, args: argparse.Namespace, device: Any, bench: Bench, data: dict[str, Any]) -> None:
    """The whole world's collectives, then each --groups size's concurrent sub-groups; rank 0 writes as it goes."""
    dist = torch_module("distributed")

    world, sizes, out = args.world, args.sizes, Path(args.out)
    say = print if rank == 0 else (lambda *a, **k: None)
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, bench.records)
    data["ops_other_ranks"] = [{"rank": r, "ops": ops} for r, ops in enumerate(gathered) if r != 0]
    say("== collectives", flush=True)
    checks: list[Any] = [None] * world
    dist.all_gather_object(checks, check_collectives(device, world))
    data["collective_checks"] = checks
    say(f"  correct on every rank: {checks}", flush=True)
    mine = run_collectives(sizes, device, world, sizes.tiny, args.iters, args.repeats)
    data["collectives"] = slowest(mine, world, rank)
    if rank == 0:
        devkit.write_json(out, data)
    data["collectives_groups"] = []
    for size in args.groups:
        # every rank creates every group (torch's rule), then uses its own
        members = sub_groups(world, size)
        handles = [dist.new_group(ranks) for ranks in members]
        group = handles[rank // size]
        say(f"== collectives in {world // size} concurrent groups of {size}: {members}", flush=True)
        checks = [None] * world
        dist.all_gather_object(checks, check_collectives(device, size, group))
        say(f"  correct on every rank: {checks}", flush=True)
        cases = group_cases(sizes, size)
        mine = run_collectives(sizes, device, size, sizes.tiny, args.iters, args.repeats, group, cases)
        data["collectives_groups"].append(
            {"group_size": size, "groups": members, "checks": checks, "cases": slowest(mine, world, rank)}
        )
        if rank == 0:
            devkit.write_json(out, data)
    dist.barrier()
    dist.destroy_process_group()


def _group_sizes(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: expected group sizes such as 4 or 4,2") from exc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", required=True, help="raw JSON file to write")
    parser.add_argument("--sizes", dest="sizes_file", help="a sizes file (model_sizes.py); default: the model itself")
    parser.add_argument("--world", type=int, default=1, help="processes (GPUs); 2+ also times the collectives")
    parser.add_argument("--tiny", action="store_true", help="toy shapes (CPU tests)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--warmup", type=int, default=None, help="untimed calls per op (default 5 GPU, 1 CPU)")
    parser.add_argument("--reps", type=int, default=None, help="timed calls per op (default 20 GPU, 3 CPU)")
    parser.add_argument("--iters", type=int, default=None, help="collectives per timed loop (default 20, CPU 2)")
    parser.add_argument("--repeats", type=int, default=5, help="timed loops per collective")
    parser.add_argument("--skip-compute", action="store_true", help="only the collectives")
    parser.add_argument(
        "--mechanisms",
        action="store_true",
        help="also run mechbench.py (ring, Ulysses packing, FP8, SDPA backends, VAE) into OUT's .mech.json",
    )
    parser.add_argument(
        "--groups",
        type=_group_sizes,
        default=[],
        help="also time each scheme's per-layer collectives inside concurrent sub-groups of these sizes "
        "(e.g. 4,2 on 8 GPUs: Ulysses4 as two groups of 4 ranks, u2/tp2 as four groups of 2)",
    )
    args = parser.parse_args(argv)
    torch, mp = torch_module(), torch_module("multiprocessing")

    cpu = args.device == "cpu"
    args.warmup = args.warmup if args.warmup is not None else (1 if cpu else 5)
    args.reps = args.reps if args.reps is not None else (3 if cpu else 20)
    args.iters = args.iters if args.iters is not None else (2 if cpu else 20)
    if args.world < 1:
        parser.error(f"--world={args.world}: expected 1 or more processes")
    for size in args.groups:
        if size < 2 or args.world % size:
            parser.error(f"--groups {size}: expected group sizes of 2 or more that divide --world={args.world}")
    if not cpu:
        if not torch.cuda.is_available():
            parser.error("--device cuda: no CUDA GPU is visible to torch (use --device cpu --tiny for a dry run)")
        if args.world > torch.cuda.device_count():
            parser.error(f"--world={args.world}: only {torch.cuda.device_count()} GPUs are visible")
        devkit.multicast_off()
    try:
        args.sizes = devkit.sizes_for(args.sizes_file, "tiny" if args.tiny else "full")
    except (OSError, ValueError, KeyError) as exc:
        parser.error(f"--sizes {args.sizes_file}: {exc}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    if args.world == 1:
        _worker(0, args, 0)
    else:
        mp.spawn(_worker, args=(args, devkit.free_port()), nprocs=args.world, join=True)
    if args.mechanisms:
        run_mechanisms(Path(args.out), args.tiny, args.device, args.sizes_file)
    return 0


def mechanisms_path(out: Path) -> Path:
    """Where --mechanisms writes mechbench's JSON: beside the raw file (raw.json -> raw.mech.json)."""
    return out.with_name(out.name.removesuffix(".json") + ".mech.json")


def run_mechanisms(out: Path, tiny: bool, device: str, sizes_file: str | None = None) -> None:
    """mechbench.py (the mechanism benchmarks, beside this file) on GPU 0, with the same sizes."""
    from . import mechbench

    argv = ["--out", str(mechanisms_path(out)), "--device", device] + (["--tiny"] if tiny else [])
    argv += ["--sizes", sizes_file] if sizes_file else []
    if device == "cpu":
        argv += ["--warmup", "0", "--reps", "1", "--vae-reps", "1"]
    mechbench.main(argv)


if __name__ == "__main__":
    sys.exit(main())
