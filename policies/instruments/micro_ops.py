"""The micro-benchmark's compute sections: one generator layer's linear layers and attention, timed on one device.

Runs on a GPU node (PyTorch and the standard library; part of microbench.py's run). With random BF16 weights in
the model's layer shape it times the card's own ceilings (a square matmul, a device copy), the layer's linear
layers over a token sweep (the rate-versus-size curve) and as tensor-parallel shards, and SDPA attention: every
backend at the anchor shape, the sweep, and the per-GPU shapes of Ulysses (all tokens, heads/U) and ring
(tokens/R queries, all keys).
"""

from __future__ import annotations

import functools
import math
import statistics
from typing import Any

from . import devkit
from .devkit import time_op, torch_module
from .shapes import SP_DEGREES, LayerShape, Sizes

HALVINGS = 9  # token counts T, T/2, ... T/256 for the rate-versus-size curve


def linear_flops(tokens: int, layer: LayerShape, tp: int = 1) -> float:
    """FLOPs of one layer's linear layers on `tokens` tokens with weights split `tp` ways."""
    return 2.0 * tokens * layer.params / tp


def attention_flops(q_tokens: int, k_tokens: int, q_heads: int, head_dim: int) -> float:
    """FLOPs of softmax(QK^T)V: two matrix products of q_tokens x k_tokens per head."""
    return 4.0 * q_tokens * k_tokens * q_heads * head_dim


def token_sweep(video_tokens: int) -> list[int]:
    """T, ceil(T/2), ceil(T/4), ... (T/2, T/4, T/8 are the per-GPU token counts of SP 2/4/8)."""
    return sorted({max(1, math.ceil(video_tokens / 2**i)) for i in range(HALVINGS)}, reverse=True)


class LinearLayer:
    """One layer's linear layers as the generator runs them: fused q/k/v, output projection, SwiGLU MLP."""

    def __init__(self, layer: LayerShape, tp: int, device: Any, dtype: Any) -> None:
        torch = torch_module()

        def weight(rows: int, cols: int) -> Any:
            return torch.randn(rows, cols, device=device, dtype=dtype) / math.sqrt(cols)

        # one TP rank's slice, q/k/v and gate/up column-parallel, o and down row-parallel: every width / tp (as
        # head_dim / tp, since the toy shapes have fewer KV heads than TP ranks; only the widths matter here)
        part = LayerShape(layer.hidden, layer.q_heads, layer.kv_heads, layer.head_dim // tp, layer.ffn // tp)
        self.q_dim, self.ffn = part.q_dim, part.ffn
        self.w_qkv, self.w_o, self.w_gate_up, self.w_down = (weight(rows, cols) for rows, cols in part.matrices)

    def run(self, x: Any, activation: bool = True) -> Any:
        """q/k/v, o, gate/up, SiLU(gate) x up, down; the attention output is stood in for by q."""
        F = torch_module("nn.functional")

        qkv = F.linear(x, self.w_qkv)
        F.linear(qkv[:, : self.q_dim], self.w_o)
        gate_up = F.linear(x, self.w_gate_up)
        hidden = gate_up[:, : self.ffn]
        if activation:
            hidden = F.silu(hidden) * gate_up[:, self.ffn :]
        return F.linear(hidden, self.w_down)


def _backends() -> dict[str, Any]:
    SDPBackend = torch_module("nn.attention").SDPBackend

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
    torch = torch_module()

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
    torch, F, attention = torch_module(), torch_module("nn.functional"), torch_module("nn.attention")
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
        torch = torch_module()

        self.sizes, self.device, self.warmup, self.reps = sizes, device, warmup, reps
        self.dtype = torch.bfloat16
        self.records: list[dict[str, Any]] = []
        self.attention_error = float("nan")

    def _record(self, op: str, name: str, tokens: int, flops: float, times: list[float], **extra: Any) -> None:
        summary = devkit.summary(times)
        tflops = flops / (summary["median_ms"] * 1e-3) / 1e12
        self.records.append(
            {"op": op, "name": name, "tokens": tokens, "flops": flops, "tflops": tflops, **extra, **summary}
        )
        print(f"  {name:<34} {summary['median_ms']:10.3f} ms {tflops:9.1f} TFLOP/s", flush=True)

    def _free(self) -> None:
        torch = torch_module()

        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def ceilings(self) -> None:
        """A plain square matmul and a device copy: the card's own ceilings on this day."""
        torch = torch_module()

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
        moved = 2 * elems * src.element_size()  # read and written
        self._record(
            "ceiling", "copy", 0, 0.0, times, bytes_moved=moved, gbps=moved / (statistics.median(times) * 1e-3) / 1e9
        )

    def linear(self) -> None:
        """The layer's linear layers over the token sweep (with and without the activation), then TP shards."""
        torch = torch_module()

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
        F, sdpa_kernel = torch_module("nn.functional"), torch_module("nn.attention").sdpa_kernel

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
