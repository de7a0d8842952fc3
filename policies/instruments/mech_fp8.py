"""The mechanism benchmarks of FP8 linear layers: `torch._scaled_mm` (e4m3, per-tensor scales, BF16 out) against
BF16 at the generator's four linear shapes and per-GPU token counts, and the activation quantisation a real FP8
linear also pays (unfused, and one pass as a fused kernel would do it).

Runs on a GPU node: PyTorch and the standard library (part of mechbench.py's run).
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any

from .devkit import torch_module

if TYPE_CHECKING:
    from .mechbench import Mech

FP8_TOKENS_DIVISORS = (1, 2, 4, 8)


def _quantize(x: Any, dtype: Any) -> Any:
    """Per-tensor dynamic FP8 scale, unfused: amax, scale, cast (a real FP8 linear fuses this)."""
    scale = x.abs().amax().float() / 448.0
    return (x / scale).to(dtype)


def fp8(bench: Mech) -> None:
    """BF16 vs FP8 (torch._scaled_mm) at the generator's four linear shapes and per-GPU token counts."""
    torch, s = torch_module(), bench.s
    shapes = {
        "qkv": (s.hidden, s.q_heads * s.head_dim + 2 * s.kv_heads * s.head_dim),
        "o": (s.q_heads * s.head_dim, s.hidden),
        "gate_up": (s.hidden, 2 * s.ffn),
        "down": (s.ffn, s.hidden),
    }
    e4m3 = torch.float8_e4m3fn
    one = torch.tensor(1.0, device=bench.device)
    for div in FP8_TOKENS_DIVISORS:
        tokens = math.ceil(s.video_tokens / div)
        for label, (k_in, n_out) in shapes.items():
            name = f"gemm-{label}-t{tokens}"
            x = torch.randn(tokens, k_in, device=bench.device, dtype=torch.bfloat16)
            w = torch.randn(n_out, k_in, device=bench.device, dtype=torch.bfloat16) / math.sqrt(k_in)
            flops = 2.0 * tokens * k_in * n_out
            bench.record(
                "fp8",
                f"{name}-bf16",
                bench.timed(functools.partial(torch.matmul, x, w.t())),
                flops=flops,
                tokens=tokens,
                op=label,
            )
            try:
                x8, w8 = x.to(e4m3), w.to(e4m3)
                mm = functools.partial(torch._scaled_mm, x8, w8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
                quant = functools.partial(_quantize, x, e4m3)
                bench.record("fp8", f"{name}-fp8", bench.timed(mm), flops=flops, tokens=tokens, op=label)
                bench.record("fp8", f"{name}-quant", bench.timed(quant), tokens=tokens, op=label)
            except Exception as exc:
                bench.error("fp8", f"{name}-fp8", exc)


def fp8_quant_one_pass(bench: Mech) -> None:
    """Activation quantisation as a fused kernel would do it (one read, one write: scale known)."""
    torch, s = torch_module(), bench.s
    for width in (s.hidden, s.q_heads * s.head_dim, s.ffn):
        x = torch.randn(s.video_tokens, width, device=bench.device, dtype=torch.bfloat16)
        times = bench.timed(functools.partial(x.to, torch.float8_e4m3fn))
        bench.record("fp8", f"quant-one-pass-t{s.video_tokens}-k{width}", times, bytes_moved=3 * x.numel())
