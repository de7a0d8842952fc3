"""One rank's denoising step of the generator: its layers, its collectives, HSDP's prefetch, and the log of
every collective it ran.

Runs on a GPU node: PyTorch and the standard library (part of generator_step.py's run). Random weights in the
model's layer shape (from the sizes). Each layer: RMS pre-norm, fused q/k/v projection, attention (SDPA, cuDNN
by default) over the video tokens and the prompt's cached K/V, output projection, RMS pre-norm, SwiGLU MLP, two
residual adds (RoPE, q/k norms and modulation are left out, as in the performance model). The plan composes,
as vLLM-Omni does: cfgN one branch per rank group, predictions all-gathered and combined; uN Ulysses all-to-alls
of q/k/v before attention and of the output after; tpN Megatron splits with two all-reduces of the hidden state
a layer; hsdpN a layer's weights all-gathered before use, the next layer's on a side stream (FSDP's prefetch).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from .devkit import torch_module
from .shapes import Sizes
from .step_plan import StepPlan, full_layer, tp_slice, weight_views

GUIDANCE = 6.0  # the anchor workload's guidance scale (the combine is the same work at any scale)


@dataclass
class CommLog:
    """Every collective of a step: kind, group size, buffer bytes and its start/end (CUDA events or host clock)."""

    cuda: bool
    sizes: Sizes  # its bus-byte rule turns a collective's time into the Profile's GB/s
    entries: list[tuple[str, int, int, Any, Any]] = field(default_factory=list)

    def start(self, stream: Any = None) -> Any:
        if not self.cuda:
            return time.perf_counter()
        torch = torch_module()
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
            bus = [self.sizes.bus_bytes(COLLECTIVE[kind], n, size) for _, size, n, _, _ in rows]
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
        sizes: Sizes,
        layers: int,
        rank: int,
        device: Any,
        dtype: Any,
        groups: dict[str, Any],
        seed: int = 17,
        backend: str = "cudnn",
    ) -> None:
        torch = torch_module()

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
        self.w_final = torch.randn((sizes.latent_channels, layer.hidden), generator=gen, device=device, dtype=dtype)
        self.w_final /= math.sqrt(layer.hidden)
        del x0
        self.log = CommLog(self.cuda, sizes)
        self.backend = backend
        if plan.hsdp:
            shard = self.weights[0].numel()
            self.gathered = [torch.empty(shard * plan.hsdp, device=device, dtype=dtype) for _ in range(2)]
            self.side: Any = torch.cuda.Stream(device) if self.cuda else None  # None on the CPU: never used there
            self.ready: list[Any] = [None, None]
            self.free: list[Any] = [torch.cuda.Event() for _ in range(2)] if self.cuda else [None, None]

    # -- collectives --
    def _a2a(self, src: Any) -> Any:
        torch, dist = torch_module(), torch_module("distributed")

        dst = torch.empty_like(src)
        begin = self.log.start()
        dist.all_to_all_single(dst, src, group=self.groups["ulysses"])
        self.log.stop("ulysses_a2a", self.plan.ulysses, src.numel() * src.element_size(), begin)
        return dst

    def _allreduce(self, x: Any) -> None:
        dist = torch_module("distributed")

        begin = self.log.start()
        dist.all_reduce(x, group=self.groups["tp"])
        self.log.stop("tp_allreduce", self.plan.tp, x.numel() * x.element_size(), begin)

    def _allgather(self, kind: str, dim: str, size: int, part: Any) -> Any:
        torch, dist = torch_module(), torch_module("distributed")

        out = torch.empty((size * part.shape[0], *part.shape[1:]), device=part.device, dtype=part.dtype)
        begin = self.log.start()
        dist.all_gather_into_tensor(out, part.contiguous(), group=self.groups[dim])
        self.log.stop(kind, size, out.numel() * out.element_size(), begin)
        return out.view(size, *part.shape)

    # -- HSDP: gather a layer's weights, the next one on a side stream while this one computes --
    def _start_gather(self, index: int) -> None:
        torch, dist = torch_module(), torch_module("distributed")

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
            torch_module().cuda.current_stream(self.device).wait_event(self.ready[slot])
        return self.gathered[slot][: self.dims.params]

    def _release(self, index: int) -> None:
        if self.plan.hsdp and self.cuda:
            self.free[index % 2].record()

    # -- one layer --
    def attention(self, q: Any, k: Any, v: Any, prompt_k: Any, prompt_v: Any) -> Any:
        """Joint attention of q (Tq, Hq, D) over the video keys (Tk, Hkv, D) and the prompt's: (Tq, Hq x D)."""
        torch, F, attention = torch_module(), torch_module("nn.functional"), torch_module("nn.attention")

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
        torch, F = torch_module(), torch_module("nn.functional")

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
        torch, F = torch_module(), torch_module("nn.functional")

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
    SDPBackend = torch_module("nn.attention").SDPBackend
    return [getattr(SDPBackend, name) for name in names]


BACKENDS = {
    "cudnn": lambda: _sdpa("CUDNN_ATTENTION"),
    "default": lambda: _sdpa("CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION"),
}
