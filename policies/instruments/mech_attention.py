"""The mechanism benchmarks of attention: ring chunks + log-sum-exp merge, Ulysses' head packing, every SDPA
backend, GQA as vLLM-Omni calls SDPA, and vLLM-Omni's backends as it calls them (FlashAttention-3 where installed).

Runs on a GPU node: PyTorch and the standard library (part of mechbench.py's run). Each section is a function of
the run's Mech, which keeps the records; a kernel that cannot run a shape here is a record, not a failure.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import itertools
import math
import statistics
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .devkit import torch_module

if TYPE_CHECKING:
    from .mechbench import Mech, MechSizes

RING_SPLITS = ((2, 1), (1, 2), (2, 2), (4, 2), (1, 4), (1, 8))  # (ulysses, ring) per-GPU splits
_FA3_MISSING = "not installed: FLASH_ATTN's FlashAttention-3 kernel (pip install fa3-fwd==0.0.3, vLLM-Omni's pin)"


# ---- attention with log-sum-exp, ring merge ------------------------------------------------------------------
def sdpa_lse(q: Any, k: Any, v: Any, backend: str) -> tuple[Any, Any]:
    """Attention output and its log-sum-exp (B, H, Tq) from the chosen fused kernel (math on the CPU)."""
    torch = torch_module()
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
    torch = torch_module()
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


def gqa_inputs(s: MechSizes, q_tokens: int, k_tokens: int, heads: int, kv: int, device: Any) -> tuple[Any, Any, Any]:
    torch = torch_module()
    q = torch.randn(1, heads, q_tokens, s.head_dim, device=device, dtype=torch.bfloat16)
    k, v = (
        torch.randn(1, kv, k_tokens, s.head_dim, device=device, dtype=torch.bfloat16).repeat_interleave(heads // kv, 1)
        for _ in range(2)
    )
    return q, k, v


def ring_chunks(s: MechSizes, r: int) -> list[tuple[int, int]]:
    """The key ranges of r ring chunks: the video keys split evenly, the prompt keys riding with the first."""
    bounds = [s.prompt_tokens + (i * s.video_tokens) // r for i in range(r + 1)]
    bounds[0] = 0
    return list(itertools.pairwise(bounds))


def fa3_module() -> Any:
    """The FA3 forward interface vLLM-Omni's FLASH_ATTN uses on Hopper, or None where it is not installed."""
    for name in ("fa3_fwd_interface", "flash_attn_interface"):
        try:
            return importlib.import_module(name)
        except Exception:  # not installed, or built for another torch: the records say unavailable
            continue
    return None


def fa3_chunks(fa3: Any, q: Any, chunks: list[tuple[Any, Any]], scale: float, merge: bool) -> Any:
    """q against each K/V chunk by FA3 with its LSE (B, H, Tq), partial outputs merged by log-sum-exp."""
    torch = torch_module()
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


# ---- the sections ---------------------------------------------------------------------------------------------
def ring(bench: Mech) -> None:
    """Chunked attention + LSE merge vs one call of the same FLOPs, per split and backend."""
    s = bench.s
    for backend in bench.backends():
        for u, r in RING_SPLITS:
            heads, kv = s.q_heads // u, max(1, s.kv_heads // u)
            q_tokens = math.ceil(s.video_tokens / (u * r)) * u  # after Ulysses: all u's tokens, heads/u
            name = f"ring-u{u}-r{r}-{backend}"
            try:
                q, k, v = gqa_inputs(s, q_tokens, s.video_tokens + s.prompt_tokens, heads, kv, bench.device)
                chunks = [(k[:, :, a:b], v[:, :, a:b]) for a, b in ring_chunks(s, r)]
                flops = 4.0 * q_tokens * k.shape[2] * heads * s.head_dim
                one_call = functools.partial(sdpa_lse, q, k, v, backend)
                ref = sdpa_lse(q, k, v, backend)[0].float()
                chunks_of = functools.partial(ring_attention, q, chunks, backend)
                _ring_case(bench, name, backend, u, r, flops, one_call, chunks_of, ref)
            except Exception as exc:  # a kernel that cannot run here is a record, not a failure
                bench.error("ring", name, exc)


def _ring_case(
    bench: Mech,
    name: str,
    backend: str,
    u: int,
    r: int,
    flops: float,
    one_call: Callable[[], object],
    chunks_of: Callable[[bool], Any],
    ref: Any,
) -> None:
    """One split's records: one call, the chunks alone, the chunks merged (with its error against `ref`),
    and the overheads of the last two over the first."""
    one = bench.record("ring", f"{name}-one-call", bench.timed(one_call))
    one["merge_rel_err"] = float((chunks_of(True) - ref).norm() / ref.norm())
    chunked = bench.timed(functools.partial(chunks_of, False))
    merged = bench.timed(functools.partial(chunks_of, True))
    bench.record("ring", f"{name}-chunks", chunked, u=u, r=r, backend=backend)
    rec = bench.record("ring", f"{name}-merged", merged, u=u, r=r, backend=backend, flops=flops)
    rec["overhead_vs_one_call"] = rec["median_ms"] / one["median_ms"] - 1
    rec["chunking_vs_one_call"] = statistics.median(chunked) / one["median_ms"] - 1
    one.update(u=u, r=r, backend=backend, flops=flops)


def ulysses_pack(bench: Mech) -> None:
    """The copies around Ulysses' all-to-alls: q/k/v (T/u, H) -> (u, T/u, H/u) and the output back."""
    torch, s = torch_module(), bench.s
    for u in (2, 4, 8):
        tokens = math.ceil(s.video_tokens / u)
        kv = max(1, s.kv_heads // u) * u  # KV heads replicated up to u when u exceeds them
        q = torch.randn(tokens, s.q_heads, s.head_dim, device=bench.device, dtype=torch.bfloat16)
        k = torch.randn(tokens, kv, s.head_dim, device=bench.device, dtype=torch.bfloat16)

        def pack(x: Any, u: int = u) -> Any:
            t, h, d = x.shape
            return x.reshape(t, u, h // u, d).permute(1, 0, 2, 3).contiguous()

        def unpack(x: Any, u: int = u) -> Any:  # received (u, T/u, H/u, D) -> (T, H/u, D) as attention reads it
            return x.reshape(-1, x.shape[2], x.shape[3]).transpose(0, 1).contiguous()

        packed_q, packed_k = pack(q), pack(k)
        moved = 2 * (q.numel() + 2 * k.numel()) * 2 * 2  # read + write, q/k/v in and the output back, bytes
        both = functools.partial(_pack_round, pack, unpack, q, k, packed_q, packed_k)
        times = bench.timed(both)
        out_times = bench.timed(functools.partial(_compose, unpack, pack, q))
        rec = bench.record("ulysses_pack", f"ulysses-pack-u{u}", times, u=u, tokens=tokens, bytes_moved=moved)
        rec["output_roundtrip_ms"] = statistics.median(out_times)


def _pack_round(pack: Callable[[Any], Any], unpack: Callable[[Any], Any], q: Any, k: Any, pq: Any, pk: Any) -> None:
    """q, k, v packed for the all-to-all and the received buffers unpacked (v has k's shape)."""
    pack(q), pack(k), pack(k), unpack(pq), unpack(pk), unpack(pk)


def _compose(outer: Callable[[Any], Any], inner: Callable[[Any], Any], x: Any) -> Any:
    return outer(inner(x))


def sdpa_backends(bench: Mech) -> None:
    """Every SDPA backend at the anchor shape (math at 1/16 of the queries and 8 heads: its scores must fit)."""
    F, attn = torch_module("nn.functional"), torch_module("nn.attention")
    s = bench.s
    keys = s.video_tokens + s.prompt_tokens
    for member in [m for m in attn.SDPBackend.__members__ if m != "ERROR"]:
        math_path = member == "MATH"
        q_tokens, heads = (max(1, s.video_tokens // 16), 8) if math_path else (s.video_tokens, s.q_heads)
        name = f"sdpa-{member.lower()}"
        try:
            q, k, v = gqa_inputs(s, q_tokens, keys, heads, max(1, heads * s.kv_heads // s.q_heads), bench.device)
            with attn.sdpa_kernel([getattr(attn.SDPBackend, member)]):
                times = bench.timed(functools.partial(F.scaled_dot_product_attention, q, k, v))
            flops = 4.0 * q_tokens * keys * heads * s.head_dim
            bench.record("sdpa", name, times, flops=flops, backend=member.lower(), q_tokens=q_tokens, heads=heads)
        except Exception as exc:
            bench.error("sdpa", name, exc)


def gqa(bench: Mech) -> None:
    """SDPA as vLLM-Omni's CUDNN_ATTN/TORCH_SDPA backends call it: 8 KV heads un-repeated (enable_gqa=True),
    at the anchor and at the Ulysses-4 per-GPU shape (16 query / 2 KV heads), against repeated KV heads."""
    torch, F, attn = torch_module(), torch_module("nn.functional"), torch_module("nn.attention")
    s = bench.s
    keys = s.video_tokens + s.prompt_tokens
    for u in (1, 4):
        heads, kv = s.q_heads // u, max(1, s.kv_heads // u)
        q = torch.randn(1, s.video_tokens, heads, s.head_dim, device=bench.device, dtype=torch.bfloat16)
        k, v = (torch.randn(1, keys, kv, s.head_dim, device=bench.device, dtype=torch.bfloat16) for _ in range(2))
        qt, kt, vt = (x.permute(0, 2, 1, 3) for x in (q, k, v))  # (B, T, H, D) seen as (B, H, T, D)
        kr, vr = (x.repeat_interleave(heads // kv, dim=1) for x in (kt, vt))
        flops = 4.0 * s.video_tokens * keys * heads * s.head_dim
        for backend in bench.backends():
            member = {"cudnn": "CUDNN_ATTENTION", "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION"}
            kernel = [getattr(attn.SDPBackend, member.get(backend, "MATH"))]
            for label, (kk, vv, gqa) in {"gqa": (kt, vt, True), "repeated": (kr, vr, False)}.items():
                name = f"sdpa-{backend}-u{u}-{label}"
                try:
                    with attn.sdpa_kernel(kernel):
                        call = functools.partial(F.scaled_dot_product_attention, qt, kk, vv, enable_gqa=gqa)
                        times = bench.timed(call)
                    bench.record("gqa", name, times, flops=flops, backend=backend, u=u, enable_gqa=gqa)
                except Exception as exc:
                    bench.error("gqa", name, exc)


def vllm_backends(bench: Mech) -> None:
    """vLLM-Omni's attention backends as they call their kernels, at each Ulysses split's per-GPU shape (64/u
    query heads, 8/u KV heads, all 44,160 video queries against the 48,256 keys, (B, T, H, D) tensors):
    FLASH_ATTN on Hopper is FlashAttention-3 (`fa3_fwd_interface.flash_attn_func`, the wheel vLLM-Omni pins;
    recorded as unavailable where it is not installed); CUDNN_ATTN is SDPA pinned to cuDNN on the permuted
    views with enable_gqa, mask-free and with a broadcast key-padding mask (the masked plan); PyTorch's own
    flash kernel (FA2) for reference. Then FA3's ring chunks: the queries against r key chunks with their
    log-sum-exp, merged unfused, against one FA3 call."""
    torch, F, attn = torch_module(), torch_module("nn.functional"), torch_module("nn.attention")
    s = bench.s
    keys = s.video_tokens + s.prompt_tokens
    scale = 1.0 / math.sqrt(s.head_dim)
    fa3 = fa3_module()
    for u in (1, 2, 4, 8):
        heads, kv = s.q_heads // u, max(1, s.kv_heads // u)
        q = torch.randn(1, s.video_tokens, heads, s.head_dim, device=bench.device, dtype=torch.bfloat16)
        k, v = (torch.randn(1, keys, kv, s.head_dim, device=bench.device, dtype=torch.bfloat16) for _ in range(2))
        qt, kt, vt = (x.permute(0, 2, 1, 3) for x in (q, k, v))
        pad = s.prompt_tokens // 2  # half the prompt slots are padding (the mask's content does not change the plan)
        mask = torch.ones(1, 1, 1, keys, dtype=torch.bool, device=bench.device)
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
        if bench.device.type == "cpu":
            cases = {"math": ([attn.SDPBackend.MATH], cases["cudnn-masked"][1])}
        if fa3 is not None:
            cases["fa3"] = ([], functools.partial(fa3.flash_attn_func, q, k, v, softmax_scale=scale))
            # vLLM-Omni's FLASH_ATTN on Hopper: the dense call as a varlen call of one sequence each
            cu_q = torch.tensor([0, s.video_tokens], device=bench.device, dtype=torch.int32)
            cu_k = torch.tensor([0, keys], device=bench.device, dtype=torch.int32)
            varlen = functools.partial(
                fa3.flash_attn_varlen_func, q[0], k[0], v[0], cu_q, cu_k, s.video_tokens, keys, softmax_scale=scale
            )
            cases["fa3-varlen"] = ([], varlen)
        else:
            bench.records.append({"section": "backends", "name": f"backend-fa3-u{u}", "error": _FA3_MISSING})
        for label, (kernel, call) in cases.items():
            name = f"backend-{label}-u{u}"
            try:
                with attn.sdpa_kernel(kernel) if kernel else contextlib.nullcontext():
                    times = bench.timed(call)
                bench.record("backends", name, times, flops=flops, backend=label, u=u, heads=heads, kv_heads=kv)
            except Exception as exc:
                bench.error("backends", name, exc)
        if fa3 is not None and bench.records[-1].get("backend") == "fa3-varlen":
            try:  # the kernels agree: FA3's output against cuDNN's on the same inputs
                with attn.sdpa_kernel([attn.SDPBackend.CUDNN_ATTENTION]):
                    ref = cases["cudnn"][1]().permute(0, 2, 1, 3).float()
                got = fa3.flash_attn_func(q, k, v, softmax_scale=scale)
                got = (got[0] if isinstance(got, tuple) else got).float()
                bench.records[-1]["rel_err_vs_cudnn"] = float((got - ref).norm() / ref.norm())
            except Exception as exc:
                bench.error("backends", f"backend-fa3-u{u}-check", exc)
        del q, k, v, qt, kt, vt
    if fa3 is not None:
        _fa3_ring(bench, fa3, scale)


def _fa3_ring(bench: Mech, fa3: Any, scale: float) -> None:
    """FA3 against r key chunks with its LSE, merged unfused, vs one FA3 call (the splits of RING_SPLITS)."""
    torch, s = torch_module(), bench.s
    keys = s.video_tokens + s.prompt_tokens
    for u, r in RING_SPLITS:
        if r < 2:
            continue
        heads, kv = s.q_heads // u, max(1, s.kv_heads // u)
        q_tokens = math.ceil(s.video_tokens / (u * r)) * u
        name = f"ring-u{u}-r{r}-fa3"
        try:
            q = torch.randn(1, q_tokens, heads, s.head_dim, device=bench.device, dtype=torch.bfloat16)
            k, v = (torch.randn(1, keys, kv, s.head_dim, device=bench.device, dtype=torch.bfloat16) for _ in range(2))
            chunks = [(k[:, a:b], v[:, a:b]) for a, b in ring_chunks(s, r)]
            flops = 4.0 * q_tokens * keys * heads * s.head_dim
            one_call = functools.partial(fa3.flash_attn_func, q, k, v, softmax_scale=scale, return_attn_probs=True)
            ref = fa3.flash_attn_func(q, k, v, softmax_scale=scale)
            ref = (ref[0] if isinstance(ref, tuple) else ref).float()
            chunks_of = functools.partial(fa3_chunks, fa3, q, chunks, scale)
            _ring_case(bench, name, "fa3", u, r, flops, one_call, chunks_of, ref)
        except Exception as exc:
            bench.error("ring", name, exc)
