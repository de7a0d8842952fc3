"""The mechanism benchmarks of tensor parallel and wide Ulysses ranks: the generator's GEMMs at a TP rank's
sharded shapes and a Ulysses rank's token counts (BF16 and FP8), and the work of a layer that is not a GEMM nor
attention (norms, RoPE, SwiGLU's gate, residual adds, the prompt K/V concatenation), at each rank's shape.

Runs on a GPU node: PyTorch and the standard library (part of mechbench.py's run, sections `tp` and `rank`).
The shapes are vLLM-Omni 0.30's Cosmos3 generator layer (transformer_cosmos3.py, read for its shapes): separate
ColumnParallel to_q / to_k / to_v (hidden -> heads x head_dim / tp each), a RowParallel to_out, separate
ColumnParallel gate_proj / up_proj and a RowParallel down_proj. The fused q/k/v and gate/up shapes are timed
beside them (a checkpoint that fused them would run those). A TP rank holds every token and 1/tp of the widths;
a Ulysses rank holds 1/u of the tokens and every width.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any

from .devkit import torch_module

if TYPE_CHECKING:
    from .mechbench import Mech

DEGREES = (1, 2, 4, 8)
EPS = 1e-6


def linear_shapes(s: Any, tp: int) -> dict[str, tuple[int, int]]:
    """(K in, N out) of each linear a TP rank runs (vLLM-Omni's separate projections), plus the fused ones."""
    q, kv = s.q_heads * s.head_dim // tp, max(1, s.kv_heads // tp) * s.head_dim
    return {
        "q": (s.hidden, q),
        "k": (s.hidden, kv),
        "v": (s.hidden, kv),
        "o": (q, s.hidden),
        "gate": (s.hidden, s.ffn // tp),
        "up": (s.hidden, s.ffn // tp),
        "down": (s.ffn // tp, s.hidden),
        "qkv-fused": (s.hidden, q + 2 * kv),
        "gate_up-fused": (s.hidden, 2 * s.ffn // tp),
    }


def _gemm(bench: Mech, name: str, tokens: int, k_in: int, n_out: int, fp8: bool, **extra: Any) -> None:
    torch, F = torch_module(), torch_module("nn.functional")
    x = torch.randn(tokens, k_in, device=bench.device, dtype=torch.bfloat16)
    w = torch.randn(n_out, k_in, device=bench.device, dtype=torch.bfloat16) / math.sqrt(k_in)
    flops = 2.0 * tokens * k_in * n_out
    shape = {"tokens": tokens, "k": k_in, "n": n_out, **extra}
    bench.record("tp", f"{name}-bf16", bench.timed(functools.partial(F.linear, x, w)), flops=flops, **shape)
    if not fp8:
        return
    try:
        e4m3, one = torch.float8_e4m3fn, torch.tensor(1.0, device=bench.device)
        x8, w8 = x.to(e4m3), w.to(e4m3)
        mm = functools.partial(torch._scaled_mm, x8, w8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        bench.record("tp", f"{name}-fp8", bench.timed(mm), flops=flops, **shape)
    except Exception as exc:  # a CPU toy run, or a GPU without FP8
        bench.error("tp", f"{name}-fp8", exc)


def tp_gemms(bench: Mech) -> None:
    """Every linear of a TP rank at tp = 1, 2, 4, 8 (all tokens), and of a Ulysses rank at u = 2, 4, 8 (1/u of
    the tokens, whole widths): BF16 through F.linear (what vLLM's unquantised linear calls), FP8 by _scaled_mm."""
    s = bench.s
    for tp in DEGREES:
        for op, (k_in, n_out) in linear_shapes(s, tp).items():
            _gemm(bench, f"tp{tp}-{op}", s.video_tokens, k_in, n_out, True, tp=tp, op=op, u=1)
    for u in DEGREES[1:]:
        tokens = math.ceil(s.video_tokens / u)
        for op, (k_in, n_out) in linear_shapes(s, 1).items():
            _gemm(bench, f"u{u}-{op}", tokens, k_in, n_out, False, tp=1, op=op, u=u)


def layer_rest_fn(torch: Any, F: Any) -> Any:
    """A layer's work other than its GEMMs and attention, in the order Cosmos3GenDecoderLayer runs it: input
    RMSNorm (vLLM's native FP32 one, which Cosmos3 forces on CUDA), q/k per-head RMS norms, RoPE, the prompt K/V
    prepended, residual add, post-attention RMSNorm, SiLU(gate) x up, residual add. torch and F are closed over
    (no lookups inside, so torch.compile sees one graph)."""

    def rms_fp32(x: Any, weight: Any) -> Any:
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)
        return h.to(x.dtype) * weight

    def rotate_half(x: Any) -> Any:
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    def layer_rest(x: Any, q: Any, k: Any, k_und: Any, o: Any, g: Any, up: Any, m: Any, w: Any, cos: Any,
                   sin: Any) -> Any:  # fmt: skip
        normed = rms_fp32(x, w)
        qn = F.rms_norm(q, (q.shape[-1],), eps=EPS)
        kn = F.rms_norm(k, (k.shape[-1],), eps=EPS)
        qr = qn * cos + rotate_half(qn) * sin
        kr = kn * cos + rotate_half(kn) * sin
        keys = torch.cat([k_und, kr], dim=0)
        values = torch.cat([k_und, k], dim=0)
        h = x + o
        post = rms_fp32(h, w)
        act = F.silu(g) * up
        return h + m, normed, post, act, qr, keys, values

    return layer_rest


def rank_rest(bench: Mech) -> None:
    """layer_rest at a TP rank's shape (all tokens, 1/tp of the heads and FFN) for tp = 1, 2, 4, 8 and at a Ulysses
    rank's (1/u of the tokens, every head: the norms and RoPE run before the all-to-all; the prompt K/V
    concatenation, after it on all tokens and 1/u of the heads, moves about as many bytes), eager and compiled by
    torch.compile (vLLM-Omni compiles each generator layer unless enforce_eager)."""
    torch, F = torch_module(), torch_module("nn.functional")
    s = bench.s
    layer_rest = layer_rest_fn(torch, F)
    compiled = _compile(layer_rest)
    cases = [(f"tp{tp}", s.video_tokens, tp) for tp in DEGREES] + [
        (f"u{u}", math.ceil(s.video_tokens / u), 1) for u in DEGREES[1:]
    ]
    for label, tokens, tp in cases:
        dev, bf = bench.device, torch.bfloat16
        qh, kvh = s.q_heads // tp, max(1, s.kv_heads // tp)
        x, o, m = (torch.randn(tokens, s.hidden, device=dev, dtype=bf) for _ in range(3))
        q = torch.randn(tokens, qh, s.head_dim, device=dev, dtype=bf)
        k = torch.randn(tokens, kvh, s.head_dim, device=dev, dtype=bf)
        k_und = torch.randn(s.prompt_tokens, kvh, s.head_dim, device=dev, dtype=bf)
        g, up = (torch.randn(tokens, s.ffn // tp, device=dev, dtype=bf) for _ in range(2))
        w = torch.ones(s.hidden, device=dev, dtype=bf)
        cos, sin = (torch.randn(tokens, 1, s.head_dim, device=dev, dtype=bf) for _ in range(2))
        args = (x, q, k, k_und, o, g, up, m, w, cos, sin)
        # the least bytes it must move: each input read once, each output written once (BF16)
        moved = 2 * (sum(a.numel() for a in args[:8]) + 3 * x.numel() + g.numel() + q.numel() + 4 * k.numel())
        moved += 2 * 2 * k_und.numel()
        extra = {"tokens": tokens, "tp": tp, "bytes_min": moved}
        bench.record("rank", f"rest-{label}-eager", bench.timed(functools.partial(layer_rest, *args)), **extra)
        if compiled is not None:
            try:
                bench.record("rank", f"rest-{label}-compiled", bench.timed(functools.partial(compiled, *args)), **extra)
            except Exception as exc:
                bench.error("rank", f"rest-{label}-compiled", exc)
        del args, x, o, m, q, k, k_und, g, up, cos, sin
    copy = torch.empty(s.video_tokens, s.hidden, device=bench.device, dtype=torch.bfloat16)
    src = torch.randn_like(copy)
    bench.record("rank", "copy-hidden", bench.timed(functools.partial(copy.copy_, src)), bytes_min=4 * copy.numel())


def _compile(fn: Any) -> Any:
    """torch.compile'd fn (dynamic=False: one graph per shape, as a warmed server has), or None where unavailable."""
    torch = torch_module()
    try:
        torch._dynamo.config.recompile_limit = 64  # one graph per rank shape
        return torch.compile(fn, dynamic=False)
    except Exception as exc:
        print(f"  torch.compile unavailable ({type(exc).__name__}: {str(exc)[:100]})", flush=True)
        return None
