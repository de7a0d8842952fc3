"""One denoising step of the Cosmos3-Super generator under a parallel plan, in PyTorch, timed on real GPUs.

Random BF16 weights in the generator's shapes (REFERENCE.md section 1: hidden 5120, 64 query heads x 128, 8 KV
heads, SwiGLU FFN 25600), 44,160 video tokens per CFG branch attending jointly to themselves and the 4,096
prompt tokens (the prompt's K/V, cached from the reasoner, differ per CFG branch) through SDPA's cuDNN
backend. Each layer: RMS pre-norm, fused q/k/v projection, attention, output projection, RMS pre-norm, SwiGLU
MLP, two residual adds (RoPE, q/k norms and modulation are left out, as in the performance model). A plan
composes, as vLLM-Omni does:
- 1gpu: both CFG branches one after the other on one GPU;
- cfgN: one branch per rank group, the predictions gathered (all-gather) and combined at the end of the step;
- uN (Ulysses): each rank holds 1/N of the tokens; q/k/v go to head groups by all-to-all before attention
  and the output comes back by all-to-all after it; the predictions are gathered to the full sequence;
- tpN (Megatron): column-split q/k/v and gate/up, row-split output and down projection, two all-reduces
  of the hidden state per layer;
- hsdpN: each rank keeps 1/N of every layer's weights and all-gathers a layer before using it; the next
  layer's gather runs on a side stream while this layer computes (FSDP's prefetch).
Rank layout: rank = (cfg_index x U + ulysses_index) x T + tp_index; HSDP shards over consecutive blocks of N.

Device mode: PyTorch and the standard library only (runs on a bare GPU node), one process a GPU over NCCL with
NVLink multicast off, timed with CUDA events after warm-up; per-step times are measured with --layers L layers
and reported scaled to the model's 64 (a step is L identical layers plus a few small per-step operations):

    python3 benchmarks/generator_step.py --world 2 --plans 1gpu,cfg2,u2,tp2,cfg2-hsdp2 --layers 8 --out raw.json
    python3 benchmarks/generator_step.py --world 4 --plans cfg2-u2,tp4 --tiny --device cpu --check --out t.json

--check compares every plan's guided prediction with a one-process reference computed from the same seeds.
Compare mode (here, with worldtune installed): the measured steps against the performance model's prediction
for the same plan with a measured profile, and the published 8xH200 cells:

    .venv/bin/python benchmarks/generator_step.py --compare raw.json [...] \
        [--profile policies/profiles/measured/H200-2gpu-2026-11-29.yaml] \
        [--results benchmarks/results/generator_step.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib
import importlib.util
import json
import math
import os
import re
import socket
import statistics
import sys
import time
import types
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RAW_FORMAT = "worldtune-generator-step/1"
GUIDANCE = 6.0  # the anchor workload's guidance scale (the combine is the same work at any scale)
REPO = Path(__file__).resolve().parents[1]
PLAN_TOKEN = re.compile(r"^(tp|cfg|u|hsdp)(\d+)$")
PLAN_GRAMMAR = "tokens tpN, cfgN (N=1,2), uN, hsdpN joined by '-', or 1gpu (e.g. cfg2-u4-hsdp8, tp8)"


def _microbench() -> types.ModuleType:
    """policies/gpu_microbench.py (the generator's shapes, bus-byte rules, hardware record): through worldtune when
    it is installed, else straight from the file (a bare GPU node has only torch)."""
    try:
        return importlib.import_module("worldtune.policies.gpu_microbench")
    except ImportError:
        name = "gpu_microbench"
        if name not in sys.modules:
            spec = importlib.util.spec_from_file_location(name, REPO / "policies" / "gpu_microbench.py")
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module  # dataclasses look their module up while the file executes
            spec.loader.exec_module(module)
        return sys.modules[name]


mb = _microbench()
# Toy shapes for the CPU: 8 KV heads as the real model has, so Ulysses/TP 2, 4 and 8 all split them.
TINY = mb.Sizes(mb.LayerShape(hidden=128, q_heads=16, kv_heads=8, head_dim=8, ffn=256), 96, 16, 64)


def _torch(submodule: str = "") -> Any:
    return importlib.import_module(f"torch.{submodule}" if submodule else "torch")


# ---- the plan (the device side's own parser: worldtune's Plan needs pydantic, which a GPU node may lack) ------
@dataclass(frozen=True)
class StepPlan:
    """The parallel degrees of one generator step; `world` ranks run it."""

    name: str
    cfg: int = 1
    ulysses: int = 1
    tp: int = 1
    hsdp: int = 0

    @property
    def world(self) -> int:
        product = self.cfg * self.ulysses * self.tp
        return self.hsdp if self.hsdp and product == 1 else product

    def coords(self, rank: int) -> tuple[int, int, int]:
        """(cfg index, Ulysses index, TP index) of a rank."""
        # a standalone HSDP plan (hsdpN alone) replicates the whole step on every rank: all coordinates 0
        return rank // (self.ulysses * self.tp) % self.cfg, rank // self.tp % self.ulysses, rank % self.tp

    def rank_of(self, c: int, u: int, t: int) -> int:
        return (c * self.ulysses + u) * self.tp + t

    def groups(self) -> dict[str, list[list[int]]]:
        """Every group of every dimension (all ranks must create all of them, in this order)."""
        w, ranks = self.world, range(self.world)
        c_, u_, t_ = self.cfg, self.ulysses, self.tp
        out = {
            "tp": [[self.rank_of(c, u, t) for t in range(t_)] for c in range(c_) for u in range(u_)],
            "ulysses": [[self.rank_of(c, u, t) for u in range(u_)] for c in range(c_) for t in range(t_)],
            "cfg": [[self.rank_of(c, u, t) for c in range(c_)] for u in range(u_) for t in range(t_)],
            "hsdp": [list(ranks[i : i + self.hsdp]) for i in range(0, w, self.hsdp)] if self.hsdp else [],
        }
        return {k: v for k, v in out.items() if v and len(v[0]) > 1}


def parse_plan(text: str, sizes: Any) -> StepPlan:
    """A plan string (tools/plan.py's grammar, the tokens a generator step has) checked against the shapes."""
    raw = text.strip().lower()
    degrees: dict[str, int] = {}
    for token in raw.split("-") if raw else [""]:
        if token == "1gpu":
            continue
        match = PLAN_TOKEN.match(token)
        if not match or int(match.group(2)) < 1 or match.group(1) in degrees:
            raise ValueError(f"plan={text!r}: expected {PLAN_GRAMMAR} (bad or repeated token {token!r})")
        degrees[match.group(1)] = int(match.group(2))
    # printed in tools/plan.py's order: tp, cfg, u, hsdp
    order = ("tp", "cfg", "u", "hsdp")
    name = "-".join(f"{k}{v}" for k in order if (v := degrees.get(k, 1)) > 1 or (k == "hsdp" and k in degrees))
    plan = StepPlan(
        name or "1gpu", degrees.get("cfg", 1), degrees.get("u", 1), degrees.get("tp", 1), degrees.get("hsdp", 0)
    )
    layer = sizes.layer
    problems = []
    if plan.cfg > 2:
        problems.append("cfg is 1 or 2 (two CFG branches)")
    if "hsdp" in degrees and plan.hsdp < 2:
        problems.append("hsdp shards over 2 or more ranks")
    if plan.hsdp and plan.tp > 1:
        problems.append("hsdp cannot be combined with tp (vLLM-Omni's rule)")
    if plan.hsdp and plan.world % plan.hsdp:
        problems.append(f"hsdp{plan.hsdp} must divide the world of {plan.world}")
    for name, degree in (("u", plan.ulysses), ("tp", plan.tp)):
        if layer.kv_heads % degree or layer.q_heads % degree or sizes.video_tokens % degree:
            problems.append(f"{name}{degree} must divide the {layer.kv_heads} KV heads and the token count")
    if layer.ffn % plan.tp:
        problems.append(f"tp{plan.tp} must divide the FFN width {layer.ffn}")
    if problems:
        raise ValueError(f"plan={text!r}: " + "; ".join(problems))
    return plan


# ---- weights ------------------------------------------------------------------------------------------------
def weight_views(shape: Any, flat: Any) -> tuple[Any, Any, Any, Any]:
    """w_qkv (q+2kv, hidden), w_o (hidden, q), w_gate_up (2 ffn, hidden), w_down (hidden, ffn) of a flat buffer
    holding `shape.params` weights (shape: gpu_microbench.LayerShape, the whole layer or one TP rank's slice)."""
    q, kv, h, f = shape.q_dim, shape.kv_dim, shape.hidden, shape.ffn
    out, start = [], 0
    for rows, cols in ((q + 2 * kv, h), (h, q), (2 * f, h), (h, f)):
        out.append(flat[start : start + rows * cols].view(rows, cols))
        start += rows * cols
    return out[0], out[1], out[2], out[3]


def full_layer(sizes: Any, index: int, seed: int, device: Any, dtype: Any) -> tuple[Any, Any]:
    """Layer `index`'s full weights (flat, weight_views order) and its prompt K/V per CFG branch (2, 2, P, kv, D),
    from a seed every rank shares, so every plan computes the same function."""
    torch = _torch()

    layer = sizes.layer
    gen = torch.Generator(device=device)
    gen.manual_seed(seed * 1009 + index)
    flat = torch.empty(layer.params, device=device, dtype=dtype)
    for w in weight_views(layer, flat):
        # 1/sqrt(fan-in) keeps the residual stream's scale steady over many layers
        w.copy_(torch.randn(w.shape, generator=gen, device=device, dtype=dtype) / math.sqrt(w.shape[1]))
    prompt_kv = torch.randn(
        (2, 2, sizes.prompt_tokens, layer.kv_heads, layer.head_dim), generator=gen, device=device, dtype=dtype
    )
    return flat, prompt_kv


def tp_slice(flat: Any, sizes: Any, tp: int, index: int) -> Any:
    """The TP rank's columns of q/k/v and gate/up and rows of o and down, as one flat buffer."""
    torch = _torch()

    layer = sizes.layer
    w_qkv, w_o, w_gate_up, w_down = weight_views(layer, flat)
    q, kv, f = layer.q_dim, layer.kv_dim, layer.ffn
    qs, kvs, fs = q // tp, kv // tp, f // tp
    qkv = torch.cat(
        [
            w_qkv[index * qs : (index + 1) * qs],
            w_qkv[q + index * kvs : q + (index + 1) * kvs],
            w_qkv[q + kv + index * kvs : q + kv + (index + 1) * kvs],
        ]
    )
    gate_up = torch.cat([w_gate_up[index * fs : (index + 1) * fs], w_gate_up[f + index * fs : f + (index + 1) * fs]])
    parts = [qkv, w_o[:, index * qs : (index + 1) * qs], gate_up, w_down[:, index * fs : (index + 1) * fs]]
    return torch.cat([p.reshape(-1) for p in parts])


# ---- the step -----------------------------------------------------------------------------------------------
@dataclass
class CommLog:
    """Every collective of a step: kind, group size, buffer bytes and its start/end (CUDA events or host clock)."""

    cuda: bool
    entries: list[tuple[str, int, int, Any, Any]] = field(default_factory=list)

    def start(self, stream: Any = None) -> Any:
        if not self.cuda:
            return time.perf_counter()
        torch = _torch()
        event = torch.cuda.Event(enable_timing=True)
        event.record(stream)
        return event

    def stop(self, kind: str, size: int, nbytes: int, begin: Any, stream: Any = None) -> None:
        self.entries.append((kind, size, nbytes, begin, self.start(stream)))

    def summary(self, steps: int) -> dict[str, dict[str, Any]]:
        """Per kind: calls and bus bytes per step, median time per call, bus bandwidth (the profile's GB/s)."""
        out: dict[str, dict[str, Any]] = {}
        for kind in sorted({e[0] for e in self.entries}):
            rows = [e for e in self.entries if e[0] == kind]
            ms = [(b.elapsed_time(e) if self.cuda else (e - b) * 1e3) for _, _, _, b, e in rows]
            bus = [mb.bus_bytes(COLLECTIVE[kind], n, size) for _, size, n, _, _ in rows]
            rates = [by / (t * 1e-3) / 1e9 for by, t in zip(bus, ms, strict=True) if t > 0]
            out[kind] = {
                "calls_per_step": len(rows) / steps,
                "group_size": rows[0][1],
                "buffer_bytes": statistics.median(n for _, _, n, _, _ in rows),
                "ms_per_step": sum(ms) / steps,
                "median_ms": statistics.median(ms),
                "busbw_gbps": statistics.median(rates) if rates else 0.0,
            }
        return out


COLLECTIVE = {
    "ulysses_a2a": "a2a",
    "tp_allreduce": "allreduce",
    "hsdp_allgather": "allgather",
    "cfg_allgather": "allgather",
    "sp_allgather": "allgather",
}


class StepRunner:
    """One rank's part of a plan: its weights (whole, TP slice or HSDP shard), its groups, the step."""

    def __init__(
        self,
        plan: StepPlan,
        sizes: Any,
        layers: int,
        rank: int,
        device: Any,
        dtype: Any,
        groups: dict[str, Any],
        seed: int = 17,
        backend: str = "cudnn",
    ) -> None:
        torch = _torch()

        self.plan, self.sizes, self.layers, self.rank, self.device, self.dtype = (
            plan,
            sizes,
            layers,
            rank,
            device,
            dtype,
        )
        self.groups = groups  # dimension -> this rank's process group (absent: a dimension of 1)
        self.cuda = device.type == "cuda"
        self.c, self.u, self.t = plan.coords(rank)
        layer = sizes.layer
        # this rank's slice of a layer: the query/KV heads and FFN width it computes
        self.dims = dataclasses.replace(
            layer, q_heads=layer.q_heads // plan.tp, kv_heads=layer.kv_heads // plan.tp, ffn=layer.ffn // plan.tp
        )
        self.tokens = sizes.video_tokens // plan.ulysses  # this rank's tokens
        self.weights: list[Any] = []  # per layer: flat weights (or this rank's HSDP shard)
        self.prompt_kv: list[Any] = []
        for index in range(layers):
            flat, prompt_kv = full_layer(sizes, index, seed, device, dtype)
            if plan.tp > 1:
                flat = tp_slice(flat, sizes, plan.tp, self.t)
                kvs = layer.kv_heads // plan.tp
                prompt_kv = prompt_kv[:, :, :, self.t * kvs : (self.t + 1) * kvs].contiguous()
            if plan.hsdp:
                shard = math.ceil(flat.numel() / plan.hsdp)
                padded = torch.zeros(shard * plan.hsdp, device=device, dtype=dtype)
                padded[: flat.numel()] = flat
                i = rank % plan.hsdp
                flat = padded[i * shard : (i + 1) * shard].clone()
                del padded
            self.weights.append(flat)
            self.prompt_kv.append(prompt_kv)
        gen = torch.Generator(device=device)
        gen.manual_seed(seed)
        x0 = torch.randn((sizes.video_tokens, layer.hidden), generator=gen, device=device, dtype=dtype)
        self.x0 = x0[self.u * self.tokens : (self.u + 1) * self.tokens].clone()
        self.w_final = torch.randn((mb.LATENT_CHANNELS, layer.hidden), generator=gen, device=device, dtype=dtype)
        self.w_final /= math.sqrt(layer.hidden)
        del x0
        self.log = CommLog(self.cuda)
        self.backend = backend
        if plan.hsdp:
            shard = self.weights[0].numel()
            self.gathered = [torch.empty(shard * plan.hsdp, device=device, dtype=dtype) for _ in range(2)]
            self.side = torch.cuda.Stream(device) if self.cuda else None
            self.ready: list[Any] = [None, None]
            self.free = [torch.cuda.Event() for _ in range(2)] if self.cuda else [None, None]

    # -- collectives --
    def _a2a(self, src: Any) -> Any:
        torch, dist = _torch(), _torch("distributed")

        dst = torch.empty_like(src)
        begin = self.log.start()
        dist.all_to_all_single(dst, src, group=self.groups["ulysses"])
        self.log.stop("ulysses_a2a", self.plan.ulysses, src.numel() * src.element_size(), begin)
        return dst

    def _allreduce(self, x: Any) -> None:
        dist = _torch("distributed")

        begin = self.log.start()
        dist.all_reduce(x, group=self.groups["tp"])
        self.log.stop("tp_allreduce", self.plan.tp, x.numel() * x.element_size(), begin)

    def _allgather(self, kind: str, dim: str, size: int, part: Any) -> Any:
        torch, dist = _torch(), _torch("distributed")

        out = torch.empty((size * part.shape[0], *part.shape[1:]), device=part.device, dtype=part.dtype)
        begin = self.log.start()
        dist.all_gather_into_tensor(out, part.contiguous(), group=self.groups[dim])
        self.log.stop(kind, size, out.numel() * out.element_size(), begin)
        return out.view(size, *part.shape)

    # -- HSDP: gather a layer's weights, the next one on a side stream while this one computes --
    def _start_gather(self, index: int) -> None:
        torch, dist = _torch(), _torch("distributed")

        slot = index % 2
        buffer, shard = self.gathered[slot], self.weights[index]
        if not self.cuda:
            begin = self.log.start()
            dist.all_gather_into_tensor(buffer, shard, group=self.groups["hsdp"])
            self.log.stop("hsdp_allgather", self.plan.hsdp, buffer.numel() * buffer.element_size(), begin)
            return
        self.side.wait_event(self.free[slot])  # the layer that last read this buffer has finished
        with torch.cuda.stream(self.side):
            begin = self.log.start(self.side)
            dist.all_gather_into_tensor(buffer, shard, group=self.groups["hsdp"])
            self.log.stop("hsdp_allgather", self.plan.hsdp, buffer.numel() * buffer.element_size(), begin, self.side)
            ready = torch.cuda.Event()
            ready.record(self.side)
        self.ready[slot] = ready

    def _layer_weights(self, index: int) -> Any:
        if not self.plan.hsdp:
            return self.weights[index]
        slot = index % 2
        if self.cuda:
            _torch().cuda.current_stream(self.device).wait_event(self.ready[slot])
        return self.gathered[slot][: self.dims.params]

    def _release(self, index: int) -> None:
        if self.plan.hsdp and self.cuda:
            self.free[index % 2].record()

    # -- one layer --
    def attention(self, q: Any, k: Any, v: Any, prompt_k: Any, prompt_v: Any) -> Any:
        """Joint attention of q (Tq, Hq, D) over the video keys (Tk, Hkv, D) and the prompt's: (Tq, Hq x D)."""
        torch, F, attention = _torch(), _torch("nn.functional"), _torch("nn.attention")

        groups = q.shape[1] // k.shape[1]
        keys = torch.cat([k, prompt_k]).repeat_interleave(groups, dim=1)
        values = torch.cat([v, prompt_v]).repeat_interleave(groups, dim=1)
        args = (q.unsqueeze(0).transpose(1, 2), keys.unsqueeze(0).transpose(1, 2), values.unsqueeze(0).transpose(1, 2))
        if self.cuda:
            with attention.sdpa_kernel(BACKENDS[self.backend]()):
                out = F.scaled_dot_product_attention(*args)
        else:
            out = F.scaled_dot_product_attention(*args)
        return out.transpose(1, 2).reshape(q.shape[0], -1)

    def layer(self, x: Any, flat: Any, prompt_kv: Any) -> Any:
        torch, F = _torch(), _torch("nn.functional")

        d = self.dims
        w_qkv, w_o, w_gate_up, w_down = weight_views(d, flat)
        n, hd, u = x.shape[0], d.head_dim, self.plan.ulysses
        q_dim, kv_dim = d.q_heads * hd, d.kv_heads * hd
        # pre-norms as the real generator has (scale-free here): without them the SwiGLU residual stream grows
        # doubly exponentially and turns non-finite by layer ~9, and NaN data run faster than real data
        hidden = (x.shape[1],)
        qkv = F.linear(F.rms_norm(x, hidden, eps=1e-6), w_qkv)
        prompt_k, prompt_v = prompt_kv[0], prompt_kv[1]
        if u > 1:
            # q/k/v of my tokens -> all tokens of my head group: pack per destination, all-to-all, unpack
            qh, kvh = d.q_heads // u, d.kv_heads // u
            packed = torch.cat(
                [
                    qkv[:, :q_dim].view(n, u, qh, hd),
                    qkv[:, q_dim : q_dim + kv_dim].view(n, u, kvh, hd),
                    qkv[:, q_dim + kv_dim :].view(n, u, kvh, hd),
                ],
                dim=2,
            )
            got = self._a2a(packed.transpose(0, 1).contiguous()).view(u * n, qh + 2 * kvh, hd)
            q, k, v = got[:, :qh], got[:, qh : qh + kvh], got[:, qh + kvh :]
            heads = slice(self.u * kvh, (self.u + 1) * kvh)
            out = self.attention(q.contiguous(), k, v, prompt_k[:, heads], prompt_v[:, heads])
            # all tokens of my heads -> my tokens of all heads
            back = self._a2a(out.view(u, n, qh, hd)).transpose(0, 1).reshape(n, q_dim)
        else:
            q = qkv[:, :q_dim].reshape(n, d.q_heads, hd)
            k = qkv[:, q_dim : q_dim + kv_dim].view(n, d.kv_heads, hd)
            v = qkv[:, q_dim + kv_dim :].view(n, d.kv_heads, hd)
            back = self.attention(q, k, v, prompt_k, prompt_v)
        h = F.linear(back, w_o)
        if self.plan.tp > 1:
            self._allreduce(h)
        x = x + h
        gate_up = F.linear(F.rms_norm(x, hidden, eps=1e-6), w_gate_up)
        h = F.linear(F.silu(gate_up[:, : d.ffn]) * gate_up[:, d.ffn :], w_down)
        if self.plan.tp > 1:
            self._allreduce(h)
        return x + h

    def step(self) -> Any:
        """One denoising step: this rank's CFG branch(es) through every layer, the CFG gather and combine, the
        sequence gather; returns the guided prediction of every token (video tokens x latent channels)."""
        torch, F = _torch(), _torch("nn.functional")

        branches = [self.c] if self.plan.cfg == 2 else [0, 1]
        preds = []
        for branch in branches:
            x = self.x0
            if self.plan.hsdp:
                self._start_gather(0)
            for index in range(self.layers):
                if self.plan.hsdp and index + 1 < self.layers:
                    self._start_gather(index + 1)
                x = self.layer(x, self._layer_weights(index), self.prompt_kv[index][branch])
                self._release(index)
            preds.append(F.linear(x, self.w_final))
        both = self._allgather("cfg_allgather", "cfg", 2, preds[0]) if self.plan.cfg == 2 else torch.stack(preds)
        guided = both[1] + GUIDANCE * (both[0] - both[1])  # branch 0 conditional, 1 unconditional
        if self.plan.ulysses > 1:
            guided = self._allgather("sp_allgather", "ulysses", self.plan.ulysses, guided).view(-1, guided.shape[1])
        return guided


def _sdpa(*names: str) -> Any:
    SDPBackend = _torch("nn.attention").SDPBackend
    return [getattr(SDPBackend, name) for name in names]


BACKENDS = {
    "cudnn": lambda: _sdpa("CUDNN_ATTENTION"),
    "default": lambda: _sdpa("CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION"),
}


# ---- the run ------------------------------------------------------------------------------------------------
def _barrier(group: Any) -> None:
    if group is not None:
        _torch("distributed").barrier(group=group)


def run_plan(
    plan: StepPlan, args: argparse.Namespace, rank: int, world: int, device: Any, groups: dict[str, Any]
) -> dict[str, Any] | None:
    """Build the plan's weights, warm up, time `reps` steps; this rank's record (None on an idle rank)."""
    torch = _torch()

    sizes = TINY if args.tiny else mb.FULL
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
            kv = torch.randn(sizes.video_tokens, max(1, heads * layer.kv_heads // layer.q_heads), layer.head_dim,
                             device=device, dtype=dtype)  # fmt: skip
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
    record["output_finite"] = bool(_torch().isfinite(guided).all())
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
    torch, dist = _torch(), _torch("distributed")

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
    sizes = TINY if args.tiny else mb.FULL
    out = Path(args.out)
    data: dict[str, Any] = {
        "format": RAW_FORMAT,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "tiny": bool(args.tiny),
        "layers": args.layers,
        "model_layers": mb.FULL.layers,
        "warmup": args.warmup,
        "reps": args.reps,
        "sizes": {**asdict(sizes.layer), "video_tokens": sizes.video_tokens, "prompt_tokens": sizes.prompt_tokens},
        "command": " ".join(sys.argv),
        "hardware": mb.hardware(device, world),
        "plans": [],
        "complete": False,
    }
    for plan in args.plans:
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
            print(f"== {plan.name} on {plan.world} of {world} ranks, {args.layers} layers", flush=True)
        mine = run_plan(plan, args, rank, world, device, groups)
        every: list[Any] = [mine]
        if world > 1:
            every = [None] * world
            dist.all_gather_object(every, mine)
        records = [r for r in every if r is not None]
        slowest = max(records, key=lambda r: r["median_ms"])
        scaled = slowest["median_ms"] * 1e-3 * mb.FULL.layers / args.layers
        entry = {
            "plan": plan.name,
            "world": plan.world,
            "layers": args.layers,
            "step_ms": slowest["median_ms"],
            "per_step_s_scaled": scaled,
            "slowest_rank": slowest["rank"],
            "comm": own_comm(records),
            "output_finite": all(r["output_finite"] for r in records),
            "ranks": records,
        }
        if "check_rel_err" in records[0]:
            entry["check_rel_err"] = records[0]["check_rel_err"]
        data["plans"].append(entry)
        if rank == 0:
            check = f", vs one process {entry['check_rel_err']:.1e}" if "check_rel_err" in entry else ""
            comm = ", ".join(f"{k} {v['busbw_gbps']:.0f} GB/s" for k, v in entry["comm"].items())
            print(
                f"  {entry['step_ms']:10.1f} ms/step with {args.layers} layers -> {scaled:7.3f} s/step at "
                f"{mb.FULL.layers}{check}; {comm}",
                flush=True,
            )
            _write(out, data)
        if world > 1:
            dist.barrier()
    data["complete"] = True
    if rank == 0:
        _write(out, data)
        print(f"wrote {out}", flush=True)
    if world > 1:
        dist.destroy_process_group()


def _write(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", help="raw JSON file to write (device mode)")
    parser.add_argument("--world", type=int, default=1, help="processes (GPUs); a plan runs on the first ranks")
    parser.add_argument("--plans", default="1gpu", help="comma-separated plans, e.g. 1gpu,cfg2,u2,tp2,cfg2-hsdp2")
    parser.add_argument("--layers", type=int, default=64, help="layers per step (the time is scaled to 64)")
    parser.add_argument("--tiny", action="store_true", help="toy shapes (CPU tests)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--warmup", type=int, default=None, help="untimed steps (default 2 GPU, 1 CPU)")
    parser.add_argument("--reps", type=int, default=None, help="timed steps (default 5 GPU, 2 CPU)")
    parser.add_argument("--check", action="store_true", help="compare each plan's output with one process")
    parser.add_argument("--attention-backend", choices=sorted(BACKENDS), default="cudnn")
    parser.add_argument("--timeout-s", type=int, default=300, help="a stuck collective fails after this long")
    parser.add_argument("--compare", nargs="+", metavar="RAW", help="compare raw files with the model (here)")
    parser.add_argument("--profile", default=str(REPO / "policies/profiles/measured/H200-2gpu-2026-11-29.yaml"))
    parser.add_argument("--results", default=str(REPO / "benchmarks/results/generator_step.json"))
    parser.add_argument("--microbench", help="compare mode: a gpu_microbench raw file (with --groups) to show beside")
    args = parser.parse_args(argv)
    if args.compare:
        return args
    if not args.out:
        parser.error("--out: required in device mode (the raw JSON file to write)")
    sizes = TINY if args.tiny else mb.FULL
    try:
        args.plans = [parse_plan(text, sizes) for text in args.plans.split(",")]
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
        torch = _torch()
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
    if args.device == "cuda":
        # NVLink multicast stays off (it can take a shared host's GPUs out of service)
        for key, value in mb.MULTICAST_OFF_ENV.items():
            os.environ.setdefault(key, value)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    if args.world == 1:
        _worker(0, args, 0)
    else:
        _torch("multiprocessing").spawn(_worker, args=(args, _free_port()), nprocs=args.world, join=True)
    return 0


# ---- compare mode (here, with worldtune) --------------------------------------------------------------------
PLANS_8GPU = ("cfg2-u4-hsdp8", "tp8")  # the published 8xH200 plans (REFERENCE.md section 5)


MICROBENCH_CASES = {  # kind of collective in the step -> the microbench's per-layer cases of that scheme
    "ulysses_a2a": ("a2a-u{degree}-qkv", "a2a-u{degree}-out"),
    "tp_allreduce": ("allreduce-sp1",),
    "hsdp_allgather": ("allgather-hsdp-bf16",),
    "cfg_allgather": ("allgather-cfg",),
}
DEGREE = {"ulysses_a2a": "ulysses", "tp_allreduce": "tp", "hsdp_allgather": "hsdp", "cfg_allgather": "cfg"}


def isolated_busbw(microbench: dict[str, Any] | None, kind: str, degree: int) -> float | None:
    """The bus bandwidth gpu_microbench measured for this kind's per-layer cases in groups of `degree` ranks."""
    if microbench is None or kind not in MICROBENCH_CASES:
        return None
    cases: list[dict[str, Any]] = []
    if int(microbench["hardware"].get("world", 1)) == degree:
        cases += microbench.get("collectives", [])
    for block in microbench.get("collectives_groups", []):
        if block["group_size"] == degree:
            cases += block["cases"]
    names = {name.format(degree=degree) for name in MICROBENCH_CASES[kind]}
    rates = [c["busbw_gbps"] for c in cases if c["name"] in names]
    return statistics.median(rates) if rates else None


def comparison_rows(
    raws: list[dict[str, Any]], profile_path: Path, microbench: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Each measured plan next to the model's per-step with the profile; the published 8-GPU plans beside them."""
    from worldtune.policies import gpu_calibration, perf_model
    from worldtune.tools.models import get_model
    from worldtune.tools.plan import Plan
    from worldtune.tools.profile import Profile
    from worldtune.tools.workload import anchor_workload

    profile = Profile.load(profile_path)
    wl = anchor_workload()
    spec = get_model(wl.model)
    published: dict[str, float] = {}
    for row in gpu_calibration.compare_published(profile):
        plan_name = row["cell"].split()[1]
        if row["published_step_s"] is not None:
            published.setdefault(plan_name, row["published_step_s"])

    def model(plan_name: str) -> dict[str, Any]:
        step = perf_model.step_breakdown(spec, wl, Plan.parse(plan_name), profile)
        return {
            "model_per_step_s": step.total_s,
            "model_compute_comm_s": step.total_s - step.overhead_s,
            "model_comm_s": step.comm_s,
            "model_breakdown": asdict(step),
        }

    rows = []
    for raw in raws:
        hw = raw["hardware"]
        for entry in raw["plans"]:
            plan = Plan.parse(entry["plan"])
            plan_name = str(plan)
            predicted = model(plan_name)
            comm = own_comm(entry["ranks"])
            toy = bool(raw.get("tiny")) or hw.get("device_type") != "cuda"  # exercises the code, measures nothing
            # the HSDP gather runs on a side stream under the compute; the others stop the step while they run
            comm_scaled = sum(c["ms_per_step"] for k, c in comm.items() if k != "hsdp_allgather")
            rows.append(
                {
                    "plan": plan_name,
                    "world": entry["world"],
                    "gpu": hw.get("gpu_name"),
                    "toy": toy,
                    "date": raw["date"],
                    "layers": entry["layers"],
                    "measured_step_ms_at_layers": entry["step_ms"],
                    "measured_per_step_s": entry["per_step_s_scaled"],
                    "measured_exposed_comm_s": comm_scaled * 1e-3 * raw["model_layers"] / entry["layers"],
                    "measured_busbw_gbps": {k: round(c["busbw_gbps"], 1) for k, c in comm.items()},
                    "isolated_busbw_gbps": {
                        k: isolated_busbw(microbench, k, getattr(plan, DEGREE[k])) for k in comm if k in DEGREE
                    },
                    "output_finite": entry.get("output_finite"),
                    **predicted,
                    "model_rel_error": None
                    if toy
                    else predicted["model_compute_comm_s"] / entry["per_step_s_scaled"] - 1,
                    "published_per_step_s": published.get(plan_name) if entry["world"] == 8 else None,
                    "check_rel_err": entry.get("check_rel_err"),
                    "peak_memory_gib": max((r.get("peak_memory_gib", 0.0) for r in entry["ranks"]), default=0.0),
                }
            )
    ran = {(r["plan"], r["world"]) for r in rows if not r["toy"]}
    not_run = [
        {"plan": p, "world": 8, **model(p), "published_per_step_s": published.get(p), "measured_per_step_s": None}
        for p in PLANS_8GPU
        if (p, 8) not in ran
    ]
    return {"profile": str(profile_path.name), "profile_source": profile.source, "rows": rows, "not_run": not_run}


def compare(
    raw_paths: list[str], profile_path: Path, results: Path, microbench_path: Path | None = None
) -> dict[str, Any]:
    """Print the comparison table and save it as JSON."""
    from rich.console import Console
    from rich.table import Table

    raws = []
    for path in raw_paths:
        raw = json.loads(Path(path).read_text())
        if raw.get("format") != RAW_FORMAT:
            raise SystemExit(f"{path}: not a generator-step raw file (format {raw.get('format')!r})")
        raws.append(raw)
    microbench = json.loads(microbench_path.read_text()) if microbench_path else None
    result = comparison_rows(raws, profile_path, microbench)
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
                if k in DEGREE
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
        "bus GB/s in the step: the rank that waited least (the collective's own time); (alone): gpu_microbench "
        "at the same per-layer size in groups of the scheme's degree; comm s/step: the collectives that stop the "
        "step (not the HSDP gather, which runs under the compute), scaled to 64 layers[/]"
    )
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(json.dumps(result, indent=2, default=str) + "\n")
    console.print(f"saved {results}")
    return result


if __name__ == "__main__":
    sys.exit(main())
