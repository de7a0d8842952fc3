"""The micro-benchmark's collectives: all-to-all, all-reduce and all-gather at each scheme's per-layer sizes.

Runs on a GPU node (PyTorch and the standard library; part of microbench.py's run, one process a GPU over NCCL,
gloo on the CPU). The per-layer sizes are the model's (perf_model's byte formulas, carried by the sizes); a size
sweep and a small-message latency probe are this instrument's own. Each collective is checked for the right
answer first, then timed in back-to-back loops, on the whole world or inside concurrent sub-groups as a plan
runs them (cfg2-u4 on 8 GPUs does its Ulysses all-to-alls in two groups of 4).
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from .devkit import summary, time_loop, torch_module
from .shapes import CollectiveCase, Sizes

LATENCY_PROBE_BYTES = 4096


# ---- the schemes' per-layer sizes (the model's, through the sizes) -----------------------------------------------
def ulysses_bytes(sizes: Sizes, degree: int) -> tuple[int, int]:
    """Per-GPU all-to-all buffers of Ulysses `degree`: q/k/v scattered to head groups, the output gathered back."""
    return sizes.case(f"a2a-u{degree}-qkv").buffer_bytes, sizes.case(f"a2a-u{degree}-out").buffer_bytes


def tp_allreduce_bytes(sizes: Sizes, sequence_parallel: int = 1) -> int:
    """Hidden state each of TP's two all-reduces per layer sums (tokens per GPU x hidden)."""
    return sizes.case(f"allreduce-sp{sequence_parallel}").buffer_bytes


def hsdp_gather_bytes(sizes: Sizes, bytes_per_param: int = 2) -> int:
    """One layer's weights, gathered from the HSDP shards before the layer runs (BF16, or FP8 with 1)."""
    return sizes.case("allgather-hsdp-fp8" if bytes_per_param == 1 else "allgather-hsdp-bf16").buffer_bytes


def cfg_gather_bytes(sizes: Sizes) -> int:
    """Both CFG branches' latents gathered once per step."""
    return sizes.case("allgather-cfg").buffer_bytes


def collective_cases(sizes: Sizes, tiny: bool = False) -> list[CollectiveCase]:
    """The schemes' per-layer cases, then for each collective a latency probe and a geometric size sweep."""
    cases = list(sizes.cases)
    sweep = (2**14, 2**17, 2**20, 2**22) if tiny else (2**16, 2**20, 2**24, 2**26, 2**28, 2**30)
    for collective in ("a2a", "allreduce", "allgather"):
        cases.append(CollectiveCase(f"{collective}-probe", collective, LATENCY_PROBE_BYTES, "latency probe"))
        for size in sweep:
            cases.append(CollectiveCase(f"{collective}-sweep-{size}", collective, size, "size sweep"))
    return cases


# ---- checked, then timed -----------------------------------------------------------------------------------------
def check_collectives(device: Any, world: int, group: Any = None) -> dict[str, bool]:
    """Each collective gives the right answer on a small input before it is timed (a fast wrong one proves nothing).

    `group`: a sub-group of `world` ranks (None: the default group); values are the ranks within it."""
    torch, dist = torch_module(), torch_module("distributed")

    rank = dist.get_rank(group)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    total = torch.full((world * 4,), float(rank + 1), device=device, dtype=dtype)
    dist.all_reduce(total, group=group)
    src = torch.full((world * 4,), float(rank), device=device, dtype=dtype)
    got = torch.empty_like(src)
    dist.all_to_all_single(got, src, group=group)
    gathered = torch.empty(world * 4, device=device, dtype=dtype)
    dist.all_gather_into_tensor(gathered, torch.full((4,), float(rank), device=device, dtype=dtype), group=group)
    expected = torch.arange(world, device=device, dtype=dtype).repeat_interleave(4)
    return {
        "allreduce": bool((total == world * (world + 1) / 2).all()),
        "a2a": bool((got == expected).all()),
        "allgather": bool((gathered == expected).all()),
    }


def sub_groups(world: int, size: int) -> list[list[int]]:
    """Ranks of `world` split into consecutive groups of `size` (how a plan lays out its Ulysses/TP/HSDP groups:
    cfg2-u4 on 8 GPUs runs its all-to-alls in ranks 0-3 and 4-7 at the same time)."""
    if size < 2 or world % size:
        raise ValueError(f"group size {size}: expected 2 or more ranks dividing the world of {world}")
    return [list(range(start, start + size)) for start in range(0, world, size)]


def group_cases(sizes: Sizes, size: int) -> list[CollectiveCase]:
    """The per-layer cases a group of `size` ranks runs in a plan (its own Ulysses degree, TP, HSDP, CFG), plus
    the latency probes; no size sweep (the whole-world run has it)."""
    out = []
    for case in collective_cases(sizes):
        if case.scheme == "size sweep":
            continue
        if case.scheme.startswith("ulysses") and not case.scheme.startswith(f"ulysses{size} "):
            continue
        out.append(case)
    return out


def run_collectives(
    sizes: Sizes,
    device: Any,
    world: int,
    tiny: bool,
    iters: int,
    repeats: int,
    group: Any = None,
    cases: list[CollectiveCase] | None = None,
) -> list[dict[str, Any]]:
    """Every CollectiveCase (or `cases`), timed on every rank; returns this rank's records.

    With `group` (a sub-group of `world` ranks) every group runs the same collective at once, as a plan's
    concurrent Ulysses/TP groups do; the barrier before each case spans all ranks so the groups start together."""
    torch, dist = torch_module(), torch_module("distributed")

    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    elem = torch.tensor([], dtype=dtype).element_size()
    records = []
    for case in cases if cases is not None else collective_cases(sizes, tiny):
        count = max(world, case.buffer_bytes // elem // world * world)  # divisible among the ranks
        actual = count * elem
        if case.collective == "a2a":
            src = torch.randn(count, device=device, dtype=dtype)
            dst = torch.empty_like(src)
            fn: Callable[[], object] = functools.partial(dist.all_to_all_single, dst, src, group=group)
        elif case.collective == "allreduce":
            src = torch.randn(count, device=device, dtype=dtype)
            fn = functools.partial(dist.all_reduce, src, group=group)
        else:
            dst = torch.empty(count, device=device, dtype=dtype)
            src = torch.randn(count // world, device=device, dtype=dtype)
            # all_gather_into_tensor: torch 2.11 (the GPU images) has no all_gather_single
            fn = functools.partial(dist.all_gather_into_tensor, dst, src, group=group)
        dist.barrier()
        times = time_loop(fn, device, warmup=3, iters=iters, repeats=repeats)
        median = statistics.median(times)
        moved = sizes.bus_bytes(case.collective, actual, world)
        records.append(
            {
                **asdict(case),
                "buffer_bytes": actual,
                "world": world,
                "bus_bytes": moved,
                "busbw_gbps": moved / (median * 1e-3) / 1e9,
                **summary(times),
            }
        )
        del src, fn  # free this size's buffers before the next
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return records


def slowest(mine: list[dict[str, Any]], world: int, rank: int) -> list[dict[str, Any]]:
    """Each case as its slowest rank saw it (a collective finishes when its last rank does), with every rank's
    median; printed on rank 0."""
    dist = torch_module("distributed")

    every: list[Any] = [None] * world
    dist.all_gather_object(every, mine)
    out = []
    for i, record in enumerate(mine):
        worst = max((rank_records[i] for rank_records in every), key=lambda r: r["median_ms"])
        out.append({**worst, "rank_medians_ms": [rr[i]["median_ms"] for rr in every]})
        if rank == 0:
            c = out[-1]
            print(
                f"  {record['name']:<30} {c['buffer_bytes'] / 1e6:10.3f} MB {c['median_ms'] * 1e3:10.1f} us "
                f"{c['busbw_gbps']:8.1f} GB/s",
                flush=True,
            )
    return out
