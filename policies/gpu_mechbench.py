"""GPU micro-benchmarks of the mechanisms the performance model credits: ring, Ulysses packing, FP8, SDPA, VAE.

Plain PyTorch + the standard library (no worldtune import), so it runs on a bare GPU node:

    python3 policies/gpu_mechbench.py --out mech.json [--tiny] [--device cpu|cuda] [--sections ring,vae]

(`gpu_microbench.py --mechanisms` runs the same after its own sections.) At Cosmos3-Super's per-GPU shapes
(64 query heads x 128, 8 KV heads, 44,160 video + 4,096 prompt tokens per CFG branch) it times:
- ring attention's compute: a GPU's queries against the keys in r chunks (the prompt keys ride with the first),
  each chunk by SDPA with its log-sum-exp, merged unfused; against one SDPA call of the same FLOPs, and the
  chunks alone without the merge, for u2-r2, u4-r2, r2, r4, r8 and each fused SDPA backend that returns an LSE;
- Ulysses' head packing around its two all-to-alls (the permute-to-contiguous copies of q/k/v and the output);
- FP8 GEMM (`torch._scaled_mm`, e4m3, per-tensor scales, BF16 out) against BF16 at the generator's linear shapes
  and per-GPU token counts, plus the activation quantisation that a real FP8 linear also pays;
- every SDPA backend PyTorch has (math at a reduced shape: its scores would not fit at the anchor);
- a Wan-2.1-style 3D causal VAE decoder (gpu_vae_standin.py, beside this file) with random weights at 720p x 189
  frames (latent 16 x 48 x 45 x 80, decoded one latent frame at a time with cached causal convolutions, a 2x2
  unpatchify at the end): whole, each tile size of vLLM-Omni's tiled decode (latent tile 16, stride 12), and
  one of 2/4/8 spatial patches with the halo vLLM-Omni's patch decode adds (max(tile overlap / 2, half the
  core's short side)).
Records are written after every section, so a timeout keeps what ran.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import importlib
import importlib.util
import itertools
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MECH_FORMAT = "worldtune-gpu-mechbench/1"
RING_SPLITS = ((2, 1), (1, 2), (2, 2), (4, 2), (1, 4), (1, 8))  # (ulysses, ring) per-GPU splits
FP8_TOKENS_DIVISORS = (1, 2, 4, 8)
VAE_PATCHES = (2, 4, 8)


@dataclass(frozen=True)
class MechSizes:
    """Shapes the mechanisms run at (full: Cosmos3-Super at the anchor; tiny: CPU tests)."""

    q_heads: int
    kv_heads: int
    head_dim: int
    hidden: int
    ffn: int
    video_tokens: int
    prompt_tokens: int
    latent: tuple[int, int, int]  # latent frames, height, width at the anchor (16x spatial, 4x temporal)
    vae_base: int  # decoder width (Wan 2.1: 96)


FULL = MechSizes(64, 8, 128, 5120, 25600, 44160, 4096, (48, 45, 80), 96)
TINY = MechSizes(8, 2, 32, 256, 512, 552, 64, (3, 10, 14), 8)


def _torch(sub: str = "") -> Any:
    return importlib.import_module(f"torch.{sub}" if sub else "torch")


def time_ms(fn: Callable[[], object], device: Any, warmup: int, reps: int) -> list[float]:
    """Milliseconds of each timed call (CUDA events on a GPU, the host clock on the CPU)."""
    torch = _torch()
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(reps):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize(device)
            out.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t0) * 1e3)
    return out


# ---- attention with log-sum-exp, ring merge ------------------------------------------------------------------
def sdpa_lse(q: Any, k: Any, v: Any, backend: str) -> tuple[Any, Any]:
    """Attention output and its log-sum-exp (B, H, Tq) from the chosen fused kernel (math on the CPU)."""
    torch = _torch()
    aten = torch.ops.aten
    if backend == "cudnn":
        out = aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, False, False)
        return out[0], out[1].reshape(q.shape[0], q.shape[1], q.shape[2])
    if backend == "flash":
        out = aten._scaled_dot_product_flash_attention(q, k, v, 0.0, False, False)
        return out[0], out[1]
    if backend == "efficient":
        out = aten._scaled_dot_product_efficient_attention(q, k, v, None, True)
        return out[0], out[1][..., : q.shape[2]]
    scores = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    lse = torch.logsumexp(scores, dim=-1)
    return (torch.softmax(scores, dim=-1) @ v.float()).to(q.dtype), lse


def ring_attention(q: Any, chunks: list[tuple[Any, Any]], backend: str, merge: bool = True) -> Any:
    """q against each K/V chunk in turn, partial outputs merged by log-sum-exp (what a ring step does, unfused)."""
    torch = _torch()
    out: Any = None
    lse: Any = None
    for k, v in chunks:
        o_i, l_i = sdpa_lse(q, k, v, backend)
        if not merge:
            continue
        if out is None:
            out, lse = o_i.float(), l_i.float()
            continue
        new = torch.logaddexp(lse, l_i.float())
        out = out * torch.exp(lse - new).unsqueeze(-1) + o_i.float() * torch.exp(l_i.float() - new).unsqueeze(-1)
        lse = new
    return out


def _gqa_inputs(s: MechSizes, q_tokens: int, k_tokens: int, heads: int, kv: int, device: Any) -> tuple[Any, Any, Any]:
    torch = _torch()
    q = torch.randn(1, heads, q_tokens, s.head_dim, device=device, dtype=torch.bfloat16)
    k, v = (
        torch.randn(1, kv, k_tokens, s.head_dim, device=device, dtype=torch.bfloat16).repeat_interleave(heads // kv, 1)
        for _ in range(2)
    )
    return q, k, v


def _pack_round(pack: Callable[[Any], Any], unpack: Callable[[Any], Any], q: Any, k: Any, pq: Any, pk: Any) -> None:
    """q, k, v packed for the all-to-all and the received buffers unpacked (v has k's shape)."""
    pack(q), pack(k), pack(k), unpack(pq), unpack(pk), unpack(pk)


def _compose(outer: Callable[[Any], Any], inner: Callable[[Any], Any], x: Any) -> Any:
    return outer(inner(x))


def _quantize(x: Any, dtype: Any) -> Any:
    """Per-tensor dynamic FP8 scale, unfused: amax, scale, cast (a real FP8 linear fuses this)."""
    scale = x.abs().amax().float() / 448.0
    return (x / scale).to(dtype)


class Mech:
    """Runs the sections on one device and keeps the records."""

    def __init__(self, sizes: MechSizes, device: Any, warmup: int, reps: int) -> None:
        self.s, self.device, self.warmup, self.reps = sizes, device, warmup, reps
        self.records: list[dict[str, Any]] = []

    def record(self, section: str, name: str, times: list[float], **extra: Any) -> dict[str, Any]:
        rec: dict[str, Any] = {"section": section, "name": name, "median_ms": statistics.median(times)}
        rec["min_ms"] = min(times)
        rec.update(reps=len(times), times_ms=[round(t, 4) for t in times], **extra)
        self.records.append(rec)
        flops = extra.get("flops")
        rate = f"{flops / (rec['median_ms'] * 1e-3) / 1e12:9.1f} TFLOP/s" if flops else ""
        print(f"  {name:<40} {rec['median_ms']:11.3f} ms {rate}", flush=True)
        return rec

    def error(self, section: str, name: str, exc: BaseException) -> None:
        self.records.append({"section": section, "name": name, "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
        print(f"  {name:<40} unavailable ({type(exc).__name__}: {str(exc)[:100]})", flush=True)
        if self.device.type == "cuda":
            _torch().cuda.empty_cache()

    def backends(self) -> list[str]:
        return ["math"] if self.device.type == "cpu" else ["cudnn", "flash", "efficient"]

    def ring(self) -> None:
        """Chunked attention + LSE merge vs one call of the same FLOPs, per split and backend."""
        s = self.s
        for backend in self.backends():
            for u, r in RING_SPLITS:
                heads, kv = s.q_heads // u, max(1, s.kv_heads // u)
                q_tokens = math.ceil(s.video_tokens / (u * r)) * u  # after Ulysses: all u's tokens, heads/u
                name = f"ring-u{u}-r{r}-{backend}"
                try:
                    q, k, v = _gqa_inputs(s, q_tokens, s.video_tokens + s.prompt_tokens, heads, kv, self.device)
                    chunks = [(k[:, :, a:b], v[:, :, a:b]) for a, b in _ring_chunks(s, r)]
                    flops = 4.0 * q_tokens * k.shape[2] * heads * s.head_dim
                    one_call = functools.partial(sdpa_lse, q, k, v, backend)
                    ref = sdpa_lse(q, k, v, backend)[0].float()
                    chunks_of = functools.partial(ring_attention, q, chunks, backend)
                    self._ring_case(name, backend, u, r, flops, one_call, chunks_of, ref)
                except Exception as exc:  # a kernel that cannot run here is a record, not a failure
                    self.error("ring", name, exc)

    def _ring_case(
        self, name: str, backend: str, u: int, r: int, flops: float, one_call: Callable[[], object],
        chunks_of: Callable[[bool], Any], ref: Any,
    ) -> None:  # fmt: skip
        """One split's records: one call, the chunks alone, the chunks merged (with its error against `ref`),
        and the overheads of the last two over the first."""
        one = self.record("ring", f"{name}-one-call", self._t(one_call))
        one["merge_rel_err"] = float((chunks_of(True) - ref).norm() / ref.norm())
        chunked = self._t(functools.partial(chunks_of, False))
        merged = self._t(functools.partial(chunks_of, True))
        self.record("ring", f"{name}-chunks", chunked, u=u, r=r, backend=backend)
        rec = self.record("ring", f"{name}-merged", merged, u=u, r=r, backend=backend, flops=flops)
        rec["overhead_vs_one_call"] = rec["median_ms"] / one["median_ms"] - 1
        rec["chunking_vs_one_call"] = statistics.median(chunked) / one["median_ms"] - 1
        one.update(u=u, r=r, backend=backend, flops=flops)

    def _t(self, fn: Callable[[], object]) -> list[float]:
        return time_ms(fn, self.device, self.warmup, self.reps)

    def ulysses_pack(self) -> None:
        """The copies around Ulysses' all-to-alls: q/k/v (T/u, H) -> (u, T/u, H/u) and the output back."""
        torch, s = _torch(), self.s
        for u in (2, 4, 8):
            tokens = math.ceil(s.video_tokens / u)
            kv = max(1, s.kv_heads // u) * u  # KV heads replicated up to u when u exceeds them
            q = torch.randn(tokens, s.q_heads, s.head_dim, device=self.device, dtype=torch.bfloat16)
            k = torch.randn(tokens, kv, s.head_dim, device=self.device, dtype=torch.bfloat16)

            def pack(x: Any, u: int = u) -> Any:
                t, h, d = x.shape
                return x.reshape(t, u, h // u, d).permute(1, 0, 2, 3).contiguous()

            def unpack(x: Any, u: int = u) -> Any:  # received (u, T/u, H/u, D) -> (T, H/u, D) as attention reads it
                return x.reshape(-1, x.shape[2], x.shape[3]).transpose(0, 1).contiguous()

            packed_q, packed_k = pack(q), pack(k)
            moved = 2 * (q.numel() + 2 * k.numel()) * 2 * 2  # read + write, q/k/v in and the output back, bytes
            both = functools.partial(_pack_round, pack, unpack, q, k, packed_q, packed_k)
            times = self._t(both)
            out_times = self._t(functools.partial(_compose, unpack, pack, q))
            rec = self.record("ulysses_pack", f"ulysses-pack-u{u}", times, u=u, tokens=tokens, bytes_moved=moved)
            rec["output_roundtrip_ms"] = statistics.median(out_times)

    def fp8(self) -> None:
        """BF16 vs FP8 (torch._scaled_mm) at the generator's four linear shapes and per-GPU token counts."""
        torch, s = _torch(), self.s
        shapes = {
            "qkv": (s.hidden, s.q_heads * s.head_dim + 2 * s.kv_heads * s.head_dim),
            "o": (s.q_heads * s.head_dim, s.hidden),
            "gate_up": (s.hidden, 2 * s.ffn),
            "down": (s.ffn, s.hidden),
        }
        e4m3 = torch.float8_e4m3fn
        one = torch.tensor(1.0, device=self.device)
        for div in FP8_TOKENS_DIVISORS:
            tokens = math.ceil(s.video_tokens / div)
            for label, (k_in, n_out) in shapes.items():
                name = f"gemm-{label}-t{tokens}"
                x = torch.randn(tokens, k_in, device=self.device, dtype=torch.bfloat16)
                w = torch.randn(n_out, k_in, device=self.device, dtype=torch.bfloat16) / math.sqrt(k_in)
                flops = 2.0 * tokens * k_in * n_out
                self.record(
                    "fp8",
                    f"{name}-bf16",
                    self._t(functools.partial(torch.matmul, x, w.t())),
                    flops=flops,
                    tokens=tokens,
                    op=label,
                )
                try:
                    x8, w8 = x.to(e4m3), w.to(e4m3)
                    mm = functools.partial(
                        torch._scaled_mm, x8, w8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16
                    )
                    quant = functools.partial(_quantize, x, e4m3)
                    self.record("fp8", f"{name}-fp8", self._t(mm), flops=flops, tokens=tokens, op=label)
                    self.record("fp8", f"{name}-quant", self._t(quant), tokens=tokens, op=label)
                except Exception as exc:
                    self.error("fp8", f"{name}-fp8", exc)

    def sdpa_backends(self) -> None:
        """Every SDPA backend at the anchor shape (math at 1/16 of the queries and 8 heads: its scores must fit)."""
        F, attn = _torch("nn.functional"), _torch("nn.attention")
        s = self.s
        keys = s.video_tokens + s.prompt_tokens
        for member in [m for m in attn.SDPBackend.__members__ if m != "ERROR"]:
            math_path = member == "MATH"
            q_tokens, heads = (max(1, s.video_tokens // 16), 8) if math_path else (s.video_tokens, s.q_heads)
            name = f"sdpa-{member.lower()}"
            try:
                q, k, v = _gqa_inputs(s, q_tokens, keys, heads, max(1, heads * s.kv_heads // s.q_heads), self.device)
                with attn.sdpa_kernel([getattr(attn.SDPBackend, member)]):
                    times = self._t(functools.partial(F.scaled_dot_product_attention, q, k, v))
                flops = 4.0 * q_tokens * keys * heads * s.head_dim
                self.record("sdpa", name, times, flops=flops, backend=member.lower(), q_tokens=q_tokens, heads=heads)
            except Exception as exc:
                self.error("sdpa", name, exc)

    def gqa(self) -> None:
        """SDPA as vLLM-Omni's CUDNN_ATTN/TORCH_SDPA backends call it: 8 KV heads un-repeated (enable_gqa=True),
        at the anchor and at the Ulysses-4 per-GPU shape (16 query / 2 KV heads), against repeated KV heads."""
        torch, F, attn = _torch(), _torch("nn.functional"), _torch("nn.attention")
        s = self.s
        keys = s.video_tokens + s.prompt_tokens
        for u in (1, 4):
            heads, kv = s.q_heads // u, max(1, s.kv_heads // u)
            q = torch.randn(1, s.video_tokens, heads, s.head_dim, device=self.device, dtype=torch.bfloat16)
            k, v = (torch.randn(1, keys, kv, s.head_dim, device=self.device, dtype=torch.bfloat16) for _ in range(2))
            qt, kt, vt = (x.permute(0, 2, 1, 3) for x in (q, k, v))  # (B, T, H, D) seen as (B, H, T, D)
            kr, vr = (x.repeat_interleave(heads // kv, dim=1) for x in (kt, vt))
            flops = 4.0 * s.video_tokens * keys * heads * s.head_dim
            for backend in self.backends():
                member = {"cudnn": "CUDNN_ATTENTION", "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION"}
                kernel = [getattr(attn.SDPBackend, member.get(backend, "MATH"))]
                for label, (kk, vv, gqa) in {"gqa": (kt, vt, True), "repeated": (kr, vr, False)}.items():
                    name = f"sdpa-{backend}-u{u}-{label}"
                    try:
                        with attn.sdpa_kernel(kernel):
                            call = functools.partial(F.scaled_dot_product_attention, qt, kk, vv, enable_gqa=gqa)
                            times = self._t(call)
                        self.record("gqa", name, times, flops=flops, backend=backend, u=u, enable_gqa=gqa)
                    except Exception as exc:
                        self.error("gqa", name, exc)

    def vllm_backends(self) -> None:
        """vLLM-Omni's attention backends as they call their kernels, at each Ulysses split's per-GPU shape (64/u
        query heads, 8/u KV heads, all 44,160 video queries against the 48,256 keys, (B, T, H, D) tensors):
        FLASH_ATTN on Hopper is FlashAttention-3 (`fa3_fwd_interface.flash_attn_func`, the wheel vLLM-Omni pins;
        recorded as unavailable where it is not installed); CUDNN_ATTN is SDPA pinned to cuDNN on the permuted
        views with enable_gqa, mask-free and with a broadcast key-padding mask (the masked plan); PyTorch's own
        flash kernel (FA2) for reference. Then FA3's ring chunks: the queries against r key chunks with their
        log-sum-exp, merged unfused, against one FA3 call."""
        torch, F, attn = _torch(), _torch("nn.functional"), _torch("nn.attention")
        s = self.s
        keys = s.video_tokens + s.prompt_tokens
        scale = 1.0 / math.sqrt(s.head_dim)
        fa3 = _fa3()
        for u in (1, 2, 4, 8):
            heads, kv = s.q_heads // u, max(1, s.kv_heads // u)
            q = torch.randn(1, s.video_tokens, heads, s.head_dim, device=self.device, dtype=torch.bfloat16)
            k, v = (torch.randn(1, keys, kv, s.head_dim, device=self.device, dtype=torch.bfloat16) for _ in range(2))
            qt, kt, vt = (x.permute(0, 2, 1, 3) for x in (q, k, v))
            pad = (
                s.prompt_tokens // 2
            )  # half the prompt slots are padding (the mask's content does not change the plan)
            mask = torch.ones(1, 1, 1, keys, dtype=torch.bool, device=self.device)
            mask[..., s.prompt_tokens - pad : s.prompt_tokens] = False
            flops = 4.0 * s.video_tokens * keys * heads * s.head_dim
            cases: dict[str, tuple[list[Any], Callable[[], Any]]] = {
                "cudnn": (
                    [attn.SDPBackend.CUDNN_ATTENTION],
                    functools.partial(F.scaled_dot_product_attention, qt, kt, vt, scale=scale, enable_gqa=heads != kv),
                ),
                "cudnn-masked": (
                    [attn.SDPBackend.CUDNN_ATTENTION],
                    functools.partial(
                        F.scaled_dot_product_attention, qt, kt, vt, attn_mask=mask, scale=scale, enable_gqa=heads != kv
                    ),
                ),
                "fa2": (
                    [attn.SDPBackend.FLASH_ATTENTION],
                    functools.partial(F.scaled_dot_product_attention, qt, kt, vt, scale=scale, enable_gqa=heads != kv),
                ),
            }
            if self.device.type == "cpu":
                cases = {"math": ([attn.SDPBackend.MATH], cases["cudnn-masked"][1])}
            if fa3 is not None:
                cases["fa3"] = ([], functools.partial(fa3.flash_attn_func, q, k, v, softmax_scale=scale))
                # vLLM-Omni's FLASH_ATTN on Hopper: the dense call as a varlen call of one sequence each
                cu_q = torch.tensor([0, s.video_tokens], device=self.device, dtype=torch.int32)
                cu_k = torch.tensor([0, keys], device=self.device, dtype=torch.int32)
                varlen = functools.partial(
                    fa3.flash_attn_varlen_func, q[0], k[0], v[0], cu_q, cu_k, s.video_tokens, keys, softmax_scale=scale
                )
                cases["fa3-varlen"] = ([], varlen)
            else:
                self.records.append({"section": "backends", "name": f"backend-fa3-u{u}", "error": _FA3_MISSING})
            for label, (kernel, call) in cases.items():
                name = f"backend-{label}-u{u}"
                try:
                    with attn.sdpa_kernel(kernel) if kernel else contextlib.nullcontext():
                        times = self._t(call)
                    self.record("backends", name, times, flops=flops, backend=label, u=u, heads=heads, kv_heads=kv)
                except Exception as exc:
                    self.error("backends", name, exc)
            if fa3 is not None and self.records[-1].get("backend") == "fa3-varlen":
                try:  # the kernels agree: FA3's output against cuDNN's on the same inputs
                    with attn.sdpa_kernel([attn.SDPBackend.CUDNN_ATTENTION]):
                        ref = cases["cudnn"][1]().permute(0, 2, 1, 3).float()
                    got = fa3.flash_attn_func(q, k, v, softmax_scale=scale)
                    got = (got[0] if isinstance(got, tuple) else got).float()
                    self.records[-1]["rel_err_vs_cudnn"] = float((got - ref).norm() / ref.norm())
                except Exception as exc:
                    self.error("backends", f"backend-fa3-u{u}-check", exc)
            del q, k, v, qt, kt, vt
        if fa3 is not None:
            self._fa3_ring(fa3, scale)

    def _fa3_ring(self, fa3: Any, scale: float) -> None:
        """FA3 against r key chunks with its LSE, merged unfused, vs one FA3 call (the splits of RING_SPLITS)."""
        torch, s = _torch(), self.s
        keys = s.video_tokens + s.prompt_tokens
        for u, r in RING_SPLITS:
            if r < 2:
                continue
            heads, kv = s.q_heads // u, max(1, s.kv_heads // u)
            q_tokens = math.ceil(s.video_tokens / (u * r)) * u
            name = f"ring-u{u}-r{r}-fa3"
            try:
                q = torch.randn(1, q_tokens, heads, s.head_dim, device=self.device, dtype=torch.bfloat16)
                k, v = (
                    torch.randn(1, keys, kv, s.head_dim, device=self.device, dtype=torch.bfloat16) for _ in range(2)
                )
                chunks = [(k[:, a:b], v[:, a:b]) for a, b in _ring_chunks(s, r)]
                flops = 4.0 * q_tokens * keys * heads * s.head_dim
                one_call = functools.partial(fa3.flash_attn_func, q, k, v, softmax_scale=scale, return_attn_probs=True)
                ref = fa3.flash_attn_func(q, k, v, softmax_scale=scale)
                ref = (ref[0] if isinstance(ref, tuple) else ref).float()
                chunks_of = functools.partial(_fa3_chunks, fa3, q, chunks, scale)
                self._ring_case(name, "fa3", u, r, flops, one_call, chunks_of, ref)
            except Exception as exc:
                self.error("ring", name, exc)

    def fp8_quant_one_pass(self) -> None:
        """Activation quantisation as a fused kernel would do it (one read, one write: scale known)."""
        torch, s = _torch(), self.s
        for width in (s.hidden, s.q_heads * s.head_dim, s.ffn):
            x = torch.randn(s.video_tokens, width, device=self.device, dtype=torch.bfloat16)
            times = self._t(functools.partial(x.to, torch.float8_e4m3fn))
            self.record("fp8", f"quant-one-pass-t{s.video_tokens}-k{width}", times, bytes_moved=3 * x.numel())


_FA3_MISSING = "not installed: FLASH_ATTN's FlashAttention-3 kernel (pip install fa3-fwd==0.0.3, vLLM-Omni's pin)"


def _ring_chunks(s: MechSizes, r: int) -> list[tuple[int, int]]:
    """The key ranges of r ring chunks: the video keys split evenly, the prompt keys riding with the first."""
    bounds = [s.prompt_tokens + (i * s.video_tokens) // r for i in range(r + 1)]
    bounds[0] = 0
    return list(itertools.pairwise(bounds))


def _fa3() -> Any:
    """The FA3 forward interface vLLM-Omni's FLASH_ATTN uses on Hopper, or None where it is not installed."""
    for name in ("fa3_fwd_interface", "flash_attn_interface"):
        try:
            return importlib.import_module(name)
        except Exception:  # not installed, or built for another torch: the records say unavailable
            continue
    return None


def _fa3_chunks(fa3: Any, q: Any, chunks: list[tuple[Any, Any]], scale: float, merge: bool) -> Any:
    """q against each K/V chunk by FA3 with its LSE (B, H, Tq), partial outputs merged by log-sum-exp."""
    torch = _torch()
    out: Any = None
    lse: Any = None
    for k, v in chunks:
        o_i, l_i = fa3.flash_attn_func(q, k, v, softmax_scale=scale, return_attn_probs=True)[:2]
        if not merge:
            continue
        l_i = l_i.float().transpose(1, 2).unsqueeze(-1)  # (B, Tq, H, 1) against o's (B, Tq, H, D)
        if out is None:
            out, lse = o_i.float(), l_i
            continue
        new = torch.logaddexp(lse, l_i)
        out = out * torch.exp(lse - new) + o_i.float() * torch.exp(l_i - new)
        lse = new
    return out


# ---- the VAE decode (the stand-in decoder lives in gpu_vae_standin.py beside this file) ---------------------
def vae_module() -> Any:
    """gpu_vae_standin.py, loaded from beside this file (both run without worldtune installed)."""
    name = "gpu_vae_standin"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"{name}.py beside {__file__}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def vae_section(bench: Mech, reps: int) -> None:
    """Whole decode, each tile size of the tiled decode, and the largest patch of 2/4/8 with its halo."""
    torch, s, vae = _torch(), bench.s, vae_module()
    frames, lh, lw = s.latent
    decoder = vae.build_decoder(s.vae_base, bench.device)
    z = torch.randn(1, 16, frames, lh, lw, device=bench.device, dtype=torch.bfloat16)
    warm = vae.vae_decode(decoder, z[:, :, :2])  # warm-up (kernels, caches)
    cases: list[tuple[str, int, int]] = [("whole", lh, lw)]
    for code in sorted(set(vae.tile_sizes(lh, lw))):
        cases.append((f"tile-{code // 1000}x{code % 1000}", code // 1000, code % 1000))
    for pp in VAE_PATCHES:
        h, w = vae.patch_with_halo(lh, lw, pp)
        cases.append((f"patch{pp}-{h}x{w}", h, w))
    for label, h, w in cases:
        times = time_ms(functools.partial(vae.vae_decode, decoder, z[:, :, :, :h, :w]), bench.device, 0, reps)
        rec = bench.record("vae", f"vae-{label}", times, latent_h=h, latent_w=w, frames=frames)
        rec["area_share"] = h * w / (lh * lw)
    rec = bench.records[-len(cases)]
    rec["output_shape_two_latent_frames"] = list(warm.shape)  # 1 + 4 frames at 16x
    if bench.device.type == "cuda":
        rec["peak_gib"] = torch.cuda.max_memory_allocated(bench.device) / 2**30
    rec["tile_counts"] = {str(c): vae.tile_sizes(lh, lw).count(c) for c in set(vae.tile_sizes(lh, lw))}


def run(args: argparse.Namespace) -> dict[str, Any]:
    torch = _torch()
    device = torch.device(args.device)
    sizes = TINY if args.tiny else FULL
    if args.vae_base:
        sizes = MechSizes(**{**sizes.__dict__, "vae_base": args.vae_base})
    torch.manual_seed(17)
    bench = Mech(sizes, device, args.warmup, args.reps)
    out = Path(args.out)
    data: dict[str, Any] = {
        "format": MECH_FORMAT,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "tiny": bool(args.tiny),
        "command": " ".join(sys.argv),
        "torch": torch.__version__,
        "gpu_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "cudnn": torch.backends.cudnn.version() if device.type == "cuda" else None,
        "sizes": sizes.__dict__ | {"latent": list(sizes.latent)},
        "records": bench.records,
        "complete": False,
    }
    sections: list[tuple[str, Callable[[], None]]] = [
        ("sdpa backends", bench.sdpa_backends),
        ("ring: chunked attention + LSE merge", bench.ring),
        ("ulysses pack/unpack", bench.ulysses_pack),
        ("fp8 gemm", bench.fp8),
        ("gqa sdpa as vLLM-Omni calls it", bench.gqa),
        ("quant one-pass", bench.fp8_quant_one_pass),
        ("backends as vLLM-Omni calls them", bench.vllm_backends),
    ]
    sections.append(("vae decode", functools.partial(vae_section, bench, args.vae_reps)))
    wanted = set(args.sections.split(",")) if args.sections else None
    sections = [(t, f) for t, f in sections if wanted is None or t.split()[0].rstrip(":") in wanted]
    for title, section in sections:
        print(f"== {title}", flush=True)
        started = time.time()
        section()
        data.setdefault("section_s", {})[title] = round(time.time() - started, 1)
        _write(out, data)
    data["complete"] = True
    _write(out, data)
    print(f"wrote {out}", flush=True)
    return data


def _write(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--tiny", action="store_true", help="toy shapes (CPU tests)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--vae-reps", type=int, default=2, help="timed decodes per VAE case")
    p.add_argument("--vae-base", type=int, default=0, help="VAE decoder width (default 96, Wan 2.1)")
    p.add_argument(
        "--sections", default="", help="comma list of sdpa,ring,ulysses,fp8,gqa,quant,backends,vae (default all)"
    )
    return p


def main(argv: list[str] | None = None) -> int:
    run(parser().parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
