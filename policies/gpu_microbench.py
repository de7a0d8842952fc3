"""GPU micro-benchmarks of the generator's own operations: the raw data `worldtune calibrate` turns into a Profile.

Pure PyTorch + the standard library, so it runs on a bare GPU node without worldtune installed:

    python3 policies/gpu_microbench.py --out raw.json [--world N [--groups 4,2]] [--tiny] [--device cpu|cuda]

With random BF16 weights in the generator's shapes (REFERENCE.md section 1: 64 layers, hidden 5120, 64 query
heads x 128, 8 KV heads, SwiGLU FFN 25600) it times, with CUDA events after warm-up:
- one layer's linear layers (fused q/k/v projection, output projection, fused SwiGLU gate/up + down) at the
  workload's token count (44,160 per CFG branch at 720p x 189 frames) and at its halvings, so the
  rate-versus-size curve can be fitted; also tensor-parallel weight shards at the full token count;
- attention (torch SDPA) of those token counts against all keys including the 4,096 prompt tokens, the
  per-GPU shapes of Ulysses (all tokens, heads/U) and ring (tokens/R queries, all keys), and the SDPA
  backends at the anchor shape;
- with 2+ GPUs (one process a GPU, NCCL): all-to-all, all-reduce and all-gather at the per-layer sizes the
  Ulysses, TP, HSDP and CFG schemes move (the byte formulas of policies/perf_model.step_breakdown), a size
  sweep and a small-size latency probe; with --groups G also inside world/G concurrent sub-groups of G ranks
  (dist.new_group), as a plan runs them: cfg2-u4 on 8 GPUs does its Ulysses all-to-alls in two groups of 4.
It records the hardware and library versions and writes raw JSON after every section (partial results
survive a timeout). policies/gpu_calibration.py fits a Profile to that file. With --mechanisms it then runs
gpu_mechbench.py (the file beside this one: ring chunked attention + LSE merge, Ulysses packing, FP8 GEMM,
every SDPA backend, the VAE decode and its tiles) into OUT's .mech.json.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import importlib
import importlib.util
import json
import math
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

RAW_FORMAT = "worldtune-gpu-microbench/1"
BYTES_BF16 = 2
LATENT_CHANNELS = 64  # what the CFG gather moves per token (16 VAE channels x 2 x 2 patch)
SP_DEGREES = (2, 4, 8)  # Ulysses / ring / TP degrees whose per-GPU shapes and message sizes are measured
HALVINGS = 9  # token counts T, T/2, ... T/256 for the rate-versus-size curve
LATENCY_PROBE_BYTES = 4096
# NVLink multicast stays off (it can take a shared host's GPUs out of service): the one definition, read by
# `worldtune calibrate`, benchmarks/generator_step.py and checked against sky/templates/calibrate.yaml.
MULTICAST_OFF_ENV: dict[str, str] = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


@dataclass(frozen=True)
class LayerShape:
    """One generator layer (the microbench's copy of tools/models.TowerShape: worldtune is not importable here)."""

    hidden: int
    q_heads: int
    kv_heads: int
    head_dim: int
    ffn: int

    @property
    def q_dim(self) -> int:
        return self.q_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def params(self) -> int:
        """Weights of one layer: q and o (hidden x q_dim), k and v (hidden x kv_dim), three FFN matrices."""
        return 2 * self.hidden * self.q_dim + 2 * self.hidden * self.kv_dim + 3 * self.hidden * self.ffn


@dataclass(frozen=True)
class Sizes:
    """What is benchmarked: a layer shape and the workload's token counts."""

    layer: LayerShape
    video_tokens: int  # per CFG branch
    prompt_tokens: int  # keys every video token also attends to
    layers: int  # for reporting a whole step

    @property
    def keys(self) -> int:
        return self.video_tokens + self.prompt_tokens


# Cosmos3-Super's generator at the anchor workload (720p x 189 frames: 48 x 23 x 40 latent tokens).
FULL = Sizes(LayerShape(hidden=5120, q_heads=64, kv_heads=8, head_dim=128, ffn=25600), 44160, 4096, 64)
# The same structure at toy size, for CPU tests and CI: every code path, seconds of work.
TINY = Sizes(LayerShape(hidden=256, q_heads=8, kv_heads=2, head_dim=32, ffn=512), 552, 64, 2)


# ---- shape logic (pure; mirrors perf_model.step_breakdown) ---------------------------------------------------
def linear_flops(tokens: int, layer: LayerShape, tp: int = 1) -> float:
    """FLOPs of one layer's linear layers on `tokens` tokens with weights split `tp` ways."""
    return 2.0 * tokens * layer.params / tp


def attention_flops(q_tokens: int, k_tokens: int, q_heads: int, head_dim: int) -> float:
    """FLOPs of softmax(QK^T)V: two matrix products of q_tokens x k_tokens per head."""
    return 4.0 * q_tokens * k_tokens * q_heads * head_dim


def token_sweep(video_tokens: int) -> list[int]:
    """T, ceil(T/2), ceil(T/4), ... (T/2, T/4, T/8 are the per-GPU token counts of SP 2/4/8)."""
    return sorted({max(1, math.ceil(video_tokens / 2**i)) for i in range(HALVINGS)}, reverse=True)


@dataclass(frozen=True)
class CollectiveCase:
    """One collective at one per-rank buffer size, and the scheme whose per-layer traffic it is."""

    name: str
    collective: str  # "a2a" | "allreduce" | "allgather" (the Profile's bandwidth keys)
    buffer_bytes: int  # all_to_all_single in/out, all_reduce tensor, all_gather_into_tensor output
    scheme: str  # e.g. "ulysses4 q/k/v scatter", "size sweep", "latency probe"


def bus_bytes(collective: str, buffer_bytes: int, world: int) -> float:
    """Bytes each GPU puts on the links (NCCL-tests' bus-bandwidth convention, as the Profile's GB/s are)."""
    if collective == "allreduce":
        return buffer_bytes * 2.0 * (world - 1) / world
    if collective in ("a2a", "allgather"):
        return buffer_bytes * (world - 1) / world
    raise ValueError(f"collective={collective!r}: expected a2a, allreduce or allgather")


def ulysses_bytes(sizes: Sizes, degree: int, tp: int = 1) -> tuple[int, int]:
    """Per-GPU all-to-all buffers of Ulysses `degree`: q/k/v scattered to head groups, the output gathered back."""
    tokens = math.ceil(sizes.video_tokens / degree)
    layer = sizes.layer
    qkv = tokens * (layer.q_dim + 2 * layer.kv_dim) * BYTES_BF16 // tp
    out = tokens * layer.q_dim * BYTES_BF16 // tp
    return qkv, out


def tp_allreduce_bytes(sizes: Sizes, sequence_parallel: int = 1) -> int:
    """Hidden state each of TP's two all-reduces per layer sums (tokens per GPU x hidden)."""
    return math.ceil(sizes.video_tokens / sequence_parallel) * sizes.layer.hidden * BYTES_BF16


def hsdp_gather_bytes(sizes: Sizes, bytes_per_param: int = BYTES_BF16) -> int:
    """One layer's weights, gathered from the HSDP shards before the layer runs."""
    return sizes.layer.params * bytes_per_param


def cfg_gather_bytes(sizes: Sizes) -> int:
    """Both CFG branches' latents gathered once per step (perf_model moves half of it per GPU)."""
    return sizes.video_tokens * LATENT_CHANNELS * BYTES_BF16


def collective_cases(sizes: Sizes, tiny: bool = False) -> list[CollectiveCase]:
    """Per-layer sizes of every scheme, a geometric size sweep, and a latency probe, for each collective."""
    cases: list[CollectiveCase] = []
    for degree in SP_DEGREES:
        qkv, out = ulysses_bytes(sizes, degree)
        cases.append(CollectiveCase(f"a2a-u{degree}-qkv", "a2a", qkv, f"ulysses{degree} q/k/v scatter"))
        cases.append(CollectiveCase(f"a2a-u{degree}-out", "a2a", out, f"ulysses{degree} output gather"))
    for sp in (1, *SP_DEGREES[:2]):
        label = "tp (no sequence parallel)" if sp == 1 else f"tp with sequence parallel {sp}"
        cases.append(CollectiveCase(f"allreduce-sp{sp}", "allreduce", tp_allreduce_bytes(sizes, sp), label))
    cases.append(CollectiveCase("allgather-hsdp-bf16", "allgather", hsdp_gather_bytes(sizes), "hsdp layer (bf16)"))
    cases.append(CollectiveCase("allgather-hsdp-fp8", "allgather", hsdp_gather_bytes(sizes, 1), "hsdp layer (fp8)"))
    cases.append(CollectiveCase("allgather-cfg", "allgather", cfg_gather_bytes(sizes), "cfg latent gather"))
    sweep = (2**14, 2**17, 2**20, 2**22) if tiny else (2**16, 2**20, 2**24, 2**26, 2**28, 2**30)
    for collective in ("a2a", "allreduce", "allgather"):
        cases.append(CollectiveCase(f"{collective}-probe", collective, LATENCY_PROBE_BYTES, "latency probe"))
        for size in sweep:
            cases.append(CollectiveCase(f"{collective}-sweep-{size}", collective, size, "size sweep"))
    return cases


def _torch(submodule: str = "") -> Any:
    """torch (or torch.<submodule>), imported when first needed and typed loosely: the GPU images' torch
    version differs from the one type-checked here, and this module must import without torch at all."""
    return importlib.import_module(f"torch.{submodule}" if submodule else "torch")


# ---- timing -------------------------------------------------------------------------------------------------
def _summary(times_ms: list[float]) -> dict[str, Any]:
    return {
        "median_ms": statistics.median(times_ms),
        "min_ms": min(times_ms),
        "max_ms": max(times_ms),
        "reps": len(times_ms),
        "times_ms": [round(t, 5) for t in times_ms],
    }


def time_op(fn: Callable[[], object], device: Any, warmup: int, reps: int) -> list[float]:
    """Milliseconds of each of `reps` calls after `warmup` calls: CUDA events on a GPU, a host clock on the CPU."""
    torch = _torch()

    for _ in range(warmup):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
        for start, end in pairs:
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize(device)
        return [start.elapsed_time(end) for start, end in pairs]
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def time_loop(fn: Callable[[], object], device: Any, warmup: int, iters: int, repeats: int) -> list[float]:
    """Milliseconds per call of back-to-back loops of `iters` calls (how NCCL tests time collectives)."""
    torch = _torch()

    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize(device)
            start.record()
            for _ in range(iters):
                fn()
            end.record()
            torch.cuda.synchronize(device)
            out.append(start.elapsed_time(end) / iters)
        else:
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            out.append((time.perf_counter() - t0) * 1e3 / iters)
    return out


# ---- the generator's operations -----------------------------------------------------------------------------
class LinearLayer:
    """One layer's linear layers as the generator runs them: fused q/k/v, output projection, SwiGLU MLP."""

    def __init__(self, layer: LayerShape, tp: int, device: Any, dtype: Any) -> None:
        torch = _torch()

        def weight(rows: int, cols: int) -> Any:
            return torch.randn(rows, cols, device=device, dtype=dtype) / math.sqrt(cols)

        self.q_dim, self.kv_dim, self.ffn = layer.q_dim // tp, layer.kv_dim // tp, layer.ffn // tp
        self.w_qkv = weight(self.q_dim + 2 * self.kv_dim, layer.hidden)  # column-parallel under TP
        self.w_o = weight(layer.hidden, self.q_dim)  # row-parallel under TP
        self.w_gate_up = weight(2 * self.ffn, layer.hidden)
        self.w_down = weight(layer.hidden, self.ffn)

    def run(self, x: Any, activation: bool = True) -> Any:
        """q/k/v, o, gate/up, SiLU(gate) x up, down; the attention output is stood in for by q."""
        F = _torch("nn.functional")

        qkv = F.linear(x, self.w_qkv)
        F.linear(qkv[:, : self.q_dim], self.w_o)
        gate_up = F.linear(x, self.w_gate_up)
        hidden = gate_up[:, : self.ffn]
        if activation:
            hidden = F.silu(hidden) * gate_up[:, self.ffn :]
        return F.linear(hidden, self.w_down)


def _backends() -> dict[str, Any]:
    SDPBackend = _torch("nn.attention").SDPBackend

    return {
        "cudnn": [SDPBackend.CUDNN_ATTENTION],
        "flash": [SDPBackend.FLASH_ATTENTION],
        "efficient": [SDPBackend.EFFICIENT_ATTENTION],
        # SDPA's own choice among the fused kernels; the math path would need q x k scores in memory
        "default": [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION],
    }


def attention_inputs(
    q_tokens: int, k_tokens: int, q_heads: int, kv_heads: int, head_dim: int, device: Any, dtype: Any
) -> tuple[Any, Any, Any]:
    """Random q (B, H, Tq, D) and k/v with the KV heads repeated to the query heads (every SDPA kernel takes it)."""
    torch = _torch()

    groups = q_heads // kv_heads
    # (B, T, H, D) as the projections produce them, seen as (B, H, T, D): the layout a generator hands SDPA
    q = torch.randn(1, q_tokens, q_heads, head_dim, device=device, dtype=dtype)
    k, v = (
        torch.randn(1, k_tokens, kv_heads, head_dim, device=device, dtype=dtype).repeat_interleave(groups, dim=2)
        for _ in range(2)
    )
    return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)


def attention_check(layer: LayerShape, backend: str, device: Any) -> float:
    """||out - ref|| / ||ref|| of the chosen SDPA backend against float64 math on fresh random inputs."""
    torch, F, attention = _torch(), _torch("nn.functional"), _torch("nn.attention")
    SDPBackend, sdpa_kernel = attention.SDPBackend, attention.sdpa_kernel

    q, k, v = attention_inputs(256, 384, layer.q_heads, layer.kv_heads, layer.head_dim, device, torch.bfloat16)
    with sdpa_kernel([SDPBackend.MATH]):
        ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
    if device.type == "cpu":
        out = F.scaled_dot_product_attention(q, k, v)
    else:
        with sdpa_kernel(_backends()[backend]):
            out = F.scaled_dot_product_attention(q, k, v)
    return float((out.double() - ref).norm() / ref.norm())


class Bench:
    """Runs the sections on one device and keeps the records (one process; one per GPU with --world N)."""

    def __init__(self, sizes: Sizes, device: Any, warmup: int, reps: int) -> None:
        torch = _torch()

        self.sizes, self.device, self.warmup, self.reps = sizes, device, warmup, reps
        self.dtype = torch.bfloat16
        self.records: list[dict[str, Any]] = []
        self.attention_error = float("nan")

    def _record(self, op: str, name: str, tokens: int, flops: float, times: list[float], **extra: Any) -> None:
        summary = _summary(times)
        tflops = flops / (summary["median_ms"] * 1e-3) / 1e12
        self.records.append(
            {"op": op, "name": name, "tokens": tokens, "flops": flops, "tflops": tflops, **extra, **summary}
        )
        print(f"  {name:<34} {summary['median_ms']:10.3f} ms {tflops:9.1f} TFLOP/s", flush=True)

    def _free(self) -> None:
        torch = _torch()

        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def ceilings(self) -> None:
        """A plain square matmul and a device copy: the card's own ceilings on this day."""
        torch = _torch()

        n = 512 if self.device.type == "cpu" else 8192
        a, b = (torch.randn(n, n, device=self.device, dtype=self.dtype) for _ in range(2))
        self._record(
            "ceiling",
            f"matmul-{n}",
            n,
            2.0 * n**3,
            time_op(lambda: a @ b, self.device, self.warmup, self.reps),
            shape=[n, n, n],
        )
        elems = 2**20 if self.device.type == "cpu" else 2**31
        src = torch.randn(elems, device=self.device, dtype=self.dtype)
        dst = torch.empty_like(src)
        times = time_op(lambda: dst.copy_(src), self.device, self.warmup, self.reps)
        moved = 2 * elems * BYTES_BF16
        self._record(
            "ceiling", "copy", 0, 0.0, times, bytes_moved=moved, gbps=moved / (statistics.median(times) * 1e-3) / 1e9
        )

    def linear(self) -> None:
        """The layer's linear layers over the token sweep (with and without the activation), then TP shards."""
        torch = _torch()

        layer = self.sizes.layer
        full = LinearLayer(layer, 1, self.device, self.dtype)
        for tokens in token_sweep(self.sizes.video_tokens):
            x = torch.randn(tokens, layer.hidden, device=self.device, dtype=self.dtype)
            for activation, op in ((True, "linear"), (False, "linear_matmuls")):
                times = time_op(functools.partial(full.run, x, activation), self.device, self.warmup, self.reps)
                self._record(op, f"{op}-t{tokens}", tokens, linear_flops(tokens, layer), times, tp=1)
        del full, x  # before the TP shards are made
        self._free()
        x = torch.randn(self.sizes.video_tokens, layer.hidden, device=self.device, dtype=self.dtype)
        for tp in SP_DEGREES:
            shard = LinearLayer(layer, tp, self.device, self.dtype)
            times = time_op(functools.partial(shard.run, x), self.device, self.warmup, self.reps)
            tokens = self.sizes.video_tokens
            self._record("linear_tp", f"linear-tp{tp}-t{tokens}", tokens, linear_flops(tokens, layer, tp), times, tp=tp)
        self._free()

    def _attention(
        self, op: str, name: str, tokens: int, q_tokens: int, k_tokens: int, q_heads: int, kv_heads: int, backend: str
    ) -> None:
        F, sdpa_kernel = _torch("nn.functional"), _torch("nn.attention").sdpa_kernel

        layer = self.sizes.layer
        q, k, v = attention_inputs(q_tokens, k_tokens, q_heads, kv_heads, layer.head_dim, self.device, self.dtype)
        flops = attention_flops(q_tokens, k_tokens, q_heads, layer.head_dim)
        if self.device.type == "cpu":
            times = time_op(lambda: F.scaled_dot_product_attention(q, k, v), self.device, self.warmup, self.reps)
        else:
            with sdpa_kernel(_backends()[backend]):
                times = time_op(lambda: F.scaled_dot_product_attention(q, k, v), self.device, self.warmup, self.reps)
        self._record(
            op,
            name,
            tokens,
            flops,
            times,
            q_tokens=q_tokens,
            k_tokens=k_tokens,
            q_heads=q_heads,
            kv_heads=kv_heads,
            backend=backend,
        )

    def attention(self) -> str:
        """SDPA backends at the anchor shape, then the size sweep and the SP shapes with the fastest backend."""
        s, layer = self.sizes, self.sizes.layer
        t = s.video_tokens
        if self.device.type == "cpu":
            best = "default"
        else:
            rates: dict[str, float] = {}
            for backend in _backends():
                try:
                    self._attention(
                        "attention_backend",
                        f"attention-{backend}-t{t}",
                        t,
                        t,
                        s.keys,
                        layer.q_heads,
                        layer.kv_heads,
                        backend,
                    )
                    rates[backend] = self.records[-1]["tflops"]
                except Exception as exc:  # a backend that cannot run this shape here (recorded, not fatal)
                    self.records.append(
                        {
                            "op": "attention_backend",
                            "name": f"attention-{backend}-t{t}",
                            "backend": backend,
                            "error": str(exc)[:300],
                        }
                    )
                    print(f"  attention-{backend}: unavailable ({str(exc)[:120]})", flush=True)
                    self._free()
            best = max(rates, key=lambda b: rates[b]) if rates else "default"
        self.attention_error = attention_check(self.sizes.layer, best, self.device)
        print(f"  {best} backend vs a float64 reference: relative error {self.attention_error:.2e}", flush=True)
        for tokens in token_sweep(t):
            self._attention(
                "attention",
                f"attention-t{tokens}",
                tokens,
                tokens,
                tokens + s.prompt_tokens,
                layer.q_heads,
                layer.kv_heads,
                best,
            )
        for degree in SP_DEGREES:
            per_gpu = math.ceil(t / degree)
            # Ulysses: every token, heads/U (KV heads are replicated once U exceeds them)
            self._attention(
                "attention_ulysses",
                f"attention-u{degree}",
                per_gpu,
                t,
                s.keys,
                layer.q_heads // degree,
                max(1, layer.kv_heads // degree),
                best,
            )
            self._attention(
                "attention_ring", f"attention-r{degree}", per_gpu, per_gpu, s.keys, layer.q_heads, layer.kv_heads, best
            )
        return best


# ---- collectives --------------------------------------------------------------------------------------------
def check_collectives(device: Any, world: int, group: Any = None) -> dict[str, bool]:
    """Each collective gives the right answer on a small input before it is timed (a fast wrong one proves nothing).

    `group`: a sub-group of `world` ranks (None: the default group); values are the ranks within it."""
    torch, dist = _torch(), _torch("distributed")

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
    torch, dist = _torch(), _torch("distributed")

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
        moved = bus_bytes(case.collective, actual, world)
        records.append(
            {
                **asdict(case),
                "buffer_bytes": actual,
                "world": world,
                "bus_bytes": moved,
                "busbw_gbps": moved / (median * 1e-3) / 1e9,
                **_summary(times),
            }
        )
        del src, fn  # free this size's buffers before the next
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return records


# ---- the run ------------------------------------------------------------------------------------------------
def hardware(device: Any, world: int) -> dict[str, Any]:
    """GPU name and count, driver, torch/CUDA/cuDNN/NCCL versions, the NVLink-multicast settings."""
    torch = _torch()

    info: dict[str, Any] = {
        "device_type": device.type,
        "world": world,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "host_cpu": platform.processor() or platform.machine(),
        "nccl_env": {k: os.environ.get(k) for k in MULTICAST_OFF_ENV},
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(
            gpu_name=torch.cuda.get_device_name(device),
            gpu_count=torch.cuda.device_count(),
            gpu_memory_gib=round(props.total_memory / 2**30, 1),
            sm_count=props.multi_processor_count,
            cuda=torch.version.cuda,
            cudnn=torch.backends.cudnn.version(),
            nccl=".".join(str(v) for v in nccl) if isinstance(nccl := torch.cuda.nccl.version(), tuple) else str(nccl),
        )
        try:
            smi = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,power.limit", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
                check=True,
            )
            info["nvidia_smi"] = smi.stdout.strip().splitlines()
            info["driver"] = info["nvidia_smi"][0].split(",")[0].strip()
            topo = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=20)
            info["topology"] = topo.stdout.strip()
        except (OSError, subprocess.SubprocessError) as exc:
            info["nvidia_smi_error"] = str(exc)
    else:
        info.update(gpu_name="cpu", gpu_count=0)
    return info


def _write(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)


def _worker(rank: int, args: argparse.Namespace, port: int) -> None:
    torch, dist = _torch(), _torch("distributed")

    world = args.world
    # torch >= 2.13 renames all_gather_into_tensor; the old name is what GPU images with 2.11 have
    warnings.filterwarnings("ignore", message=".*all_gather_into_tensor.*", category=FutureWarning)
    if args.device == "cuda":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(max(1, (os.cpu_count() or 2) // world))
    sizes = TINY if args.tiny else FULL
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
        "tiny": bool(args.tiny),
        "sizes": {
            **asdict(sizes.layer),
            "video_tokens": sizes.video_tokens,
            "prompt_tokens": sizes.prompt_tokens,
            "layers": sizes.layers,
            "layer_params": sizes.layer.params,
        },
        "command": " ".join(sys.argv),
        "hardware": hardware(device, world),
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
            _write(out, data)
        say("== attention", flush=True)
        data["attention_backend"] = bench.attention()
        data["attention_check_rel_err"] = bench.attention_error
        data["ops"] = bench.records
    data["compute_s"] = round(time.time() - started, 1)
    if rank == 0:
        _write(out, data)
    if world > 1:
        gathered: list[Any] = [None] * world
        dist.all_gather_object(gathered, bench.records)
        data["ops_other_ranks"] = [{"rank": r, "ops": ops} for r, ops in enumerate(gathered) if r != 0]
        say("== collectives", flush=True)
        checks: list[Any] = [None] * world
        dist.all_gather_object(checks, check_collectives(device, world))
        data["collective_checks"] = checks
        say(f"  correct on every rank: {checks}", flush=True)
        mine = run_collectives(sizes, device, world, args.tiny, args.iters, args.repeats)
        data["collectives"] = _slowest(mine, world, rank)
        if rank == 0:
            _write(out, data)
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
            mine = run_collectives(sizes, device, size, args.tiny, args.iters, args.repeats, group, cases)
            data["collectives_groups"].append(
                {"group_size": size, "groups": members, "checks": checks, "cases": _slowest(mine, world, rank)}
            )
            if rank == 0:
                _write(out, data)
        dist.barrier()
        dist.destroy_process_group()
    data["complete"] = True
    data["total_s"] = round(time.time() - started, 1)
    if rank == 0:
        _write(out, data)
        print(f"wrote {out} ({data['total_s']} s)", flush=True)


def _slowest(mine: list[dict[str, Any]], world: int, rank: int) -> list[dict[str, Any]]:
    """Each case as its slowest rank saw it (a collective finishes when its last rank does), with every rank's
    median; printed on rank 0."""
    dist = _torch("distributed")

    every: list[Any] = [None] * world
    dist.all_gather_object(every, mine)
    out = []
    for i, record in enumerate(mine):
        slowest = max((rank_records[i] for rank_records in every), key=lambda r: r["median_ms"])
        out.append({**slowest, "rank_medians_ms": [rr[i]["median_ms"] for rr in every]})
        if rank == 0:
            c = out[-1]
            print(
                f"  {record['name']:<30} {c['buffer_bytes'] / 1e6:10.3f} MB {c['median_ms'] * 1e3:10.1f} us "
                f"{c['busbw_gbps']:8.1f} GB/s",
                flush=True,
            )
    return out


def _group_sizes(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: expected group sizes such as 4 or 4,2") from exc


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="raw JSON file to write")
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
        help="also run gpu_mechbench.py (ring, Ulysses packing, FP8, SDPA backends, VAE) into OUT's .mech.json",
    )
    parser.add_argument(
        "--groups",
        type=_group_sizes,
        default=[],
        help="also time each scheme's per-layer collectives inside concurrent sub-groups of these sizes "
        "(e.g. 4,2 on 8 GPUs: Ulysses4 as two groups of 4 ranks, u2/tp2 as four groups of 2)",
    )
    args = parser.parse_args(argv)
    torch, mp = _torch(), _torch("multiprocessing")

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
        # NVLink multicast stays off (it can take a shared host's GPUs out of service)
        for key, value in MULTICAST_OFF_ENV.items():
            os.environ.setdefault(key, value)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    if args.world == 1:
        _worker(0, args, 0)
    else:
        mp.spawn(_worker, args=(args, _free_port()), nprocs=args.world, join=True)
    if args.mechanisms:
        run_mechanisms(Path(args.out), args.tiny, args.device)
    return 0


def mechanisms_path(out: Path) -> Path:
    """Where --mechanisms writes gpu_mechbench's JSON: beside the raw file (raw.json -> raw.mech.json)."""
    return out.with_name(out.name.removesuffix(".json") + ".mech.json")


def run_mechanisms(out: Path, tiny: bool, device: str) -> None:
    """gpu_mechbench.py (the file beside this one: both run without worldtune installed) on GPU 0."""
    spec = importlib.util.spec_from_file_location("gpu_mechbench", Path(__file__).with_name("gpu_mechbench.py"))
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"gpu_mechbench.py beside {__file__}")
    mech = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mech
    spec.loader.exec_module(mech)
    argv = ["--out", str(mechanisms_path(out)), "--device", device] + (["--tiny"] if tiny else [])
    if device == "cpu":
        argv += ["--warmup", "0", "--reps", "1", "--vae-reps", "1"]
    mech.main(argv)


if __name__ == "__main__":
    sys.exit(main())
