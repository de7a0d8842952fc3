"""One denoising step of the Cosmos3-Super generator under a parallel plan, in PyTorch, timed on real GPUs: the run.

Runs on a GPU node: PyTorch and the standard library, one process a GPU over NCCL with NVLink multicast off (gloo
on the CPU), timed with CUDA events after warm-up; benchmarks/generator_step.py is its command line. The shapes
are the model's (the sizes: imported where worldtune is installed, else `--sizes FILE`), the plans tools/words/plan.py's
(step_plan.py); step_runner.py is one rank's step. Per-step times are measured with L layers and reported scaled
to the model's (a step is L identical layers plus a few small per-step operations). With `check`, every plan's
guided prediction is compared with a one-process reference computed from the same seeds.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from . import devkit
from .devkit import torch_module
from .shapes import Sizes, record
from .step_plan import StepPlan
from .step_runner import StepRunner

RAW_FORMAT = "worldtune-generator-step/1"


def __getattr__(name: str) -> Sizes:
    """FULL and TINY: the model's sizes (at the anchor; the step's toy), read when first asked for (PEP 562)."""
    if name in ("FULL", "TINY"):
        return devkit.sizes_for(None, "step-tiny" if name == "TINY" else "full")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def run(args: argparse.Namespace) -> None:
    """Every plan of `args.plans` on `args.world` processes (one a GPU), writing `args.out` as it goes."""
    if args.device == "cuda":
        devkit.multicast_off()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    if args.world == 1:
        _worker(0, args, 0)
    else:
        torch_module("multiprocessing").spawn(_worker, args=(args, devkit.free_port()), nprocs=args.world, join=True)


# ---- one rank -----------------------------------------------------------------------------------------------
def _barrier(group: Any) -> None:
    if group is not None:
        torch_module("distributed").barrier(group=group)


def run_plan(
    plan: StepPlan, args: argparse.Namespace, rank: int, world: int, device: Any, groups: dict[str, Any]
) -> dict[str, Any] | None:
    """Build the plan's weights, warm up, time `reps` steps; this rank's record (None on an idle rank)."""
    torch = torch_module()

    sizes: Sizes = args.sizes
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    if rank >= plan.world:
        return None
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    built = time.time()
    runner = StepRunner(plan, sizes, args.layers, rank, device, dtype, groups, backend=args.attention_backend)
    backend_note = ""
    if cuda and args.attention_backend == "cudnn":
        try:  # the cuDNN kernel at this rank's attention shape, before anything is timed
            layer = sizes.layer
            heads = layer.q_heads // (plan.ulysses * plan.tp)
            q = torch.randn(sizes.video_tokens, heads, layer.head_dim, device=device, dtype=dtype)
            kv = torch.randn(
                sizes.video_tokens,
                max(1, heads * layer.kv_heads // layer.q_heads),
                layer.head_dim,
                device=device,
                dtype=dtype,
            )
            runner.attention(q, kv, kv, kv[: sizes.prompt_tokens], kv[: sizes.prompt_tokens])
            del q, kv
        except RuntimeError as exc:
            runner.backend = "default"
            backend_note = f"cudnn refused this shape ({str(exc)[:160]}); SDPA's default choice used"
    build_s = time.time() - built
    plan_group = groups.get("plan")
    for _ in range(args.warmup):
        runner.step()
    if cuda:
        torch.cuda.synchronize(device)
    runner.log.entries.clear()
    times, walls = [], []
    for _ in range(args.reps):
        _barrier(plan_group)
        if cuda:
            torch.cuda.synchronize(device)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0 = time.perf_counter()
            start.record()
            guided = runner.step()
            end.record()
            torch.cuda.synchronize(device)
            walls.append((time.perf_counter() - t0) * 1e3)
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            guided = runner.step()
            times.append((time.perf_counter() - t0) * 1e3)
            walls.append(times[-1])
    record: dict[str, Any] = {
        "rank": rank,
        "step_ms": times,
        "wall_ms": walls,
        "median_ms": statistics.median(times),
        "comm": runner.log.summary(args.reps),
        "attention_backend": runner.backend,
        "build_s": round(build_s, 2),
    }
    if backend_note:
        record["note"] = backend_note
    if cuda:
        record["peak_memory_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
    # non-finite activations would run faster than real data (and prove nothing)
    record["output_finite"] = bool(torch_module().isfinite(guided).all())
    if args.check and rank == 0:
        reference = StepRunner(StepPlan("1gpu"), sizes, args.layers, 0, device, dtype, {}, backend=runner.backend)
        expected = reference.step().float()
        record["check_rel_err"] = float((guided.float() - expected).norm() / expected.norm())
        del reference
    del runner
    return record


def own_comm(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per kind of collective, the rank that spent least time in it: the one that arrived last, so its time is the
    collective's own; the others' also hold the wait for slower GPUs (skew), which is in the step time anyway."""
    kinds = sorted({k for r in records for k in r["comm"]})
    out = {}
    for kind in kinds:
        have = [r for r in records if kind in r["comm"]]
        best = min(have, key=lambda r: r["comm"][kind]["ms_per_step"])
        out[kind] = {
            **best["comm"][kind],
            "rank": best["rank"],
            "max_ms_per_step": max(r["comm"][kind]["ms_per_step"] for r in have),
        }
    return out


def _worker(rank: int, args: argparse.Namespace, port: int) -> None:
    torch, dist = torch_module(), torch_module("distributed")

    world = args.world
    if args.device == "cuda":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(max(1, (os.cpu_count() or 2) // world))
    if world > 1:
        dist.init_process_group(
            "nccl" if device.type == "cuda" else "gloo",
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world,
            device_id=device if device.type == "cuda" else None,
            timeout=datetime.timedelta(seconds=args.timeout_s),
        )
    sizes: Sizes = args.sizes
    out = Path(args.out)
    data: dict[str, Any] = {
        "format": RAW_FORMAT,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "tiny": sizes.tiny,
        "layers": args.layers,
        "model_layers": sizes.layers,
        "warmup": args.warmup,
        "reps": args.reps,
        "sizes": record(sizes),
        "command": " ".join(sys.argv),
        "hardware": devkit.hardware(device, world),
        "plans": [],
        "complete": False,
    }
    for plan in args.plans:
        data["plans"].append(_plan_entry(plan, args, rank, device))
        if rank == 0:
            devkit.write_json(out, data)
        if world > 1:
            dist.barrier()
    data["complete"] = True
    if rank == 0:
        devkit.write_json(out, data)
        print(f"wrote {out}", flush=True)
    if world > 1:
        dist.destroy_process_group()


def _plan_entry(plan: StepPlan, args: argparse.Namespace, rank: int, device: Any) -> dict[str, Any]:
    """One plan on every rank: its groups made, timed, the ranks' records gathered; printed on rank 0."""
    dist = torch_module("distributed")

    world, layers = args.world, args.layers
    groups: dict[str, Any] = {}
    if world > 1:
        # every rank creates every group of the plan, in the same order (torch's rule), and keeps its own
        groups["plan"] = dist.new_group(list(range(plan.world))) if plan.world > 1 else None
        for dim, members in plan.groups().items():
            for ranks in members:
                handle = dist.new_group(ranks)
                if rank in ranks:
                    groups[dim] = handle
    if rank == 0:
        print(f"== {plan.name} on {plan.world} of {world} ranks, {layers} layers", flush=True)
    mine = run_plan(plan, args, rank, world, device, groups)
    every: list[Any] = [mine]
    if world > 1:
        every = [None] * world
        dist.all_gather_object(every, mine)
    records = [r for r in every if r is not None]
    slowest = max(records, key=lambda r: r["median_ms"])
    scaled = slowest["median_ms"] * 1e-3 * args.sizes.layers / layers
    entry = {
        "plan": plan.name,
        "world": plan.world,
        "layers": layers,
        "step_ms": slowest["median_ms"],
        "per_step_s_scaled": scaled,
        "slowest_rank": slowest["rank"],
        "comm": own_comm(records),
        "output_finite": all(r["output_finite"] for r in records),
        "ranks": records,
    }
    if "check_rel_err" in records[0]:
        entry["check_rel_err"] = records[0]["check_rel_err"]
    if rank == 0:
        check = f", vs one process {entry['check_rel_err']:.1e}" if "check_rel_err" in entry else ""
        comm = ", ".join(f"{k} {v['busbw_gbps']:.0f} GB/s" for k, v in entry["comm"].items())
        print(
            f"  {entry['step_ms']:10.1f} ms/step with {layers} layers -> {scaled:7.3f} s/step at "
            f"{args.sizes.layers}{check}; {comm}",
            flush=True,
        )
    return entry
