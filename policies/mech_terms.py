"""The model's mechanism terms read off the GPU mechanism benchmarks (policies/instruments/mechbench.py raw JSON).

Each term comes with the records it was read from, so a profile's `basis` can name the file and cells:
ring's chunked-attention efficiency and log-sum-exp merge cost, Ulysses' packing cost, the FP8 linear
speedup (GEMM plus a one-pass activation quantisation), and the VAE tiled decode's per-tile costs.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worldtune.tools.words.errors import InvalidInput

MEASURED_DIR = Path(__file__).parent / "profiles" / "measured"
# The 2026-12-01 H200 run (torch 2.11.0+cu130, cuDNN 9.19): mechanisms, the 256-wide VAE decoder, the GQA check
H200_MECH = MEASURED_DIR / "H200-1gpu-2026-12-01.mechbench.json"
H200_VAE256 = MEASURED_DIR / "H200-1gpu-2026-12-01.mechbench-vae256.json"
H200_GQA = MEASURED_DIR / "H200-1gpu-2026-12-01.mechbench-gqa.json"
# The 2026-12-02 H200 run: vLLM-Omni's backends as it calls them (FA3 through fa3-fwd 0.0.3, cuDNN SDPA), FA3's ring
H200_BACKENDS = MEASURED_DIR / "H200-1gpu-2026-12-02.mechbench-backends.json"


@dataclass(frozen=True)
class Term:
    """One parameter value read off measurements: its value, relative one-sigma, and where it came from."""

    value: float
    sigma: float
    source: str
    detail: dict[str, float]


def load_mech(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise InvalidInput("mechbench", str(path), "a JSON file written by policies/instruments/mechbench.py --out")
    data: dict[str, Any] = json.loads(path.read_text())
    if data.get("format") != "worldtune-gpu-mechbench/1":
        raise InvalidInput("mechbench", str(path), "a file whose format is 'worldtune-gpu-mechbench/1'")
    return data


def _by_name(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in data["records"] if "median_ms" in r}


def ring_terms(data: dict[str, Any], name: str) -> tuple[Term, Term]:
    """Chunk efficiency (one call's time over the chunks' time) and merge ms per 1e9 output elements per hop, for
    every split with r >= 2. vLLM-Omni's Hopper ring runs FA3: where the file has FA3's ring records they alone
    are read (sigma: their spread over the splits); otherwise the middle of the cuDNN and FA2 kernels' range,
    its sigma half that range."""
    recs = _by_name(data)
    sizes = data["sizes"]
    has_fa3 = any(r.get("backend") == "fa3" and r["section"] == "ring" for r in recs.values())
    kernels_read = ("fa3",) if has_fa3 else ("cudnn", "flash", "math")  # math: a CPU toy run
    eff: dict[str, list[float]] = {}
    merge: list[float] = []
    detail: dict[str, float] = {}
    for rec in recs.values():
        if rec["section"] != "ring" or not rec["name"].endswith("-merged") or rec.get("r", 1) < 2:
            continue
        if rec["backend"] not in kernels_read:
            continue
        u, r, base = rec["u"], rec["r"], rec["name"].removesuffix("-merged")
        one, chunks = recs[f"{base}-one-call"]["median_ms"], recs[f"{base}-chunks"]["median_ms"]
        eff.setdefault(rec["backend"], []).append(one / chunks)
        q_tokens = math.ceil(sizes["video_tokens"] / (u * r)) * u
        elements = q_tokens * (sizes["q_heads"] // u) * sizes["head_dim"]
        merge.append((rec["median_ms"] - chunks) / (r - 1) / (elements / 1e9))
        detail[f"{base} overhead"] = round(rec["median_ms"] / one - 1, 4)
    if not eff or not merge:
        raise InvalidInput("mechbench", name, "a run with the ring section (cuDNN or flash SDPA, r >= 2)")
    medians = {b: statistics.median(v) for b, v in eff.items()}
    lo, hi = min(medians.values()), max(medians.values())
    kernels = ", ".join(f"{b} {v:.3f}" for b, v in sorted(medians.items()))
    if has_fa3:
        spread = statistics.pstdev(eff["fa3"]) / medians["fa3"] if len(eff["fa3"]) > 1 else 0.0
        value, sigma = medians["fa3"], max(0.02, spread)
        kernels += ", the kernel vLLM-Omni's Hopper ring runs"
    else:
        value, sigma = (lo + hi) / 2, max(0.02, (hi - lo) / (lo + hi))
    efficiency = Term(min(1.0, value), sigma, f"measured: {name} ring-*-chunks vs one-call ({kernels})", detail)
    middle = statistics.median(merge)  # a noisy toy run can read a negative merge: the cost is then nil
    merge_term = Term(
        max(0.0, middle),
        abs(statistics.pstdev(merge) / middle) if middle else 1.0,
        f"measured: {name} ring-*-merged minus -chunks per extra hop",
        {"values": round(statistics.median(merge), 3)},
    )
    return efficiency, merge_term


def ulysses_pack_term(data: dict[str, Any], name: str) -> Term:
    """Milliseconds per GB of the pack/unpack copies (q/k/v before the all-to-all, the output after it)."""
    rates = []
    for rec in _by_name(data).values():
        if rec["section"] != "ulysses_pack":
            continue
        sizes = data["sizes"]
        q_elems = rec["tokens"] * sizes["q_heads"] * sizes["head_dim"]
        total_bytes = rec["bytes_moved"] + q_elems * 2 * 2 * 2  # + the output's pack and unpack, read and write
        rates.append((rec["median_ms"] + rec["output_roundtrip_ms"]) / (total_bytes / 1e9))
    value = statistics.median(rates)
    return Term(value, 0.05, f"measured: {name} ulysses-pack-u2/u4/u8", {"GB/s": round(1e3 / value, 1)})


def fp8_linear_term(data: dict[str, Any], name: str) -> Term:
    """BF16 time of the four linear shapes over FP8 GEMM time plus a one-pass activation quantisation of each
    GEMM's input (the unfused amax/scale/cast measured here is 3-8x that: a real FP8 linear fuses it)."""
    recs = _by_name(data)
    sizes = data["sizes"]
    widths = {"qkv": sizes["hidden"], "o": sizes["q_heads"] * sizes["head_dim"], "gate_up": sizes["hidden"]}
    widths["down"] = sizes["ffn"]
    quant = [r for r in recs.values() if r["name"].startswith("quant-one-pass")]
    if quant:
        s_per_byte = statistics.median(r["median_ms"] * 1e-3 / r["bytes_moved"] for r in quant)
    else:  # an older file without the one-pass record: a device copy at 4.3 TB/s
        s_per_byte = 1 / 4.3e12
    speedups: dict[str, float] = {}
    for tokens in sorted({r["tokens"] for r in recs.values() if r["section"] == "fp8" and "tokens" in r}):
        bf16 = sum(recs[f"gemm-{op}-t{tokens}-bf16"]["median_ms"] for op in widths)
        fp8 = sum(recs[f"gemm-{op}-t{tokens}-fp8"]["median_ms"] for op in widths)
        q = sum(tokens * w * 3 * s_per_byte * 1e3 for w in widths.values())
        speedups[f"t{tokens}"] = bf16 / (fp8 + q)
    values = list(speedups.values())
    value = statistics.median(values)
    spread = max(0.05, (max(values) - min(values)) / value)
    return Term(value, abs(spread), f"measured: {name} gemm-*-bf16 / (gemm-*-fp8 + quant-one-pass)", speedups)


def vae_tile_terms(data: dict[str, Any], name: str) -> tuple[Term, Term, Term]:
    """Per-tile cost = fixed share + area cost x area share (least squares over the tile sizes, in units of
    the whole decode), and the whole decode's seconds, of the stand-in Wan-style decoder."""
    recs = _by_name(data)
    whole = recs["vae-whole"]["median_ms"]
    points = [(r["area_share"], r["median_ms"] / whole) for r in recs.values() if r["name"].startswith("vae-tile-")]
    n = len(points)
    mx, my = sum(p[0] for p in points) / n, sum(p[1] for p in points) / n
    sxx = sum((p[0] - mx) ** 2 for p in points)
    slope = sum((p[0] - mx) * (p[1] - my) for p in points) / sxx if sxx > 0 else 0.0
    slope = max(slope, 0.0)
    fixed = max(my - slope * mx, 0.0)
    detail = {r["name"]: round(r["median_ms"] / whole, 4) for r in recs.values() if r["section"] == "vae"}
    return (
        Term(fixed, 0.5, f"measured: {name} vae-tile-* over vae-whole (stand-in decoder)", detail),
        Term(slope, 0.3, f"measured: {name} vae-tile-* over vae-whole (stand-in decoder)", detail),
        Term(whole / 1e3, 0.6, f"measured: {name} vae-whole (stand-in decoder, random weights)", {}),
    )


def backend_terms(data: dict[str, Any], name: str) -> dict[str, Term]:
    """vLLM-Omni's backends at Cosmos3-Super's per-GPU shapes (u1..u8): the cuDNN kernel's rate relative to FA3 as
    FLASH_ATTN calls it (varlen, one sequence), the attention factor a CUDNN_ATTN plan would get from the kernels
    alone; and FA3's rate at the anchor (44,160 queries, 64 heads), the H200 default backend's floor."""
    recs = _by_name(data)
    ratios: dict[str, float] = {}
    for u in (1, 2, 4, 8):
        fa3, cudnn = recs.get(f"backend-fa3-varlen-u{u}"), recs.get(f"backend-cudnn-u{u}")
        if fa3 and cudnn:
            ratios[f"u{u}"] = fa3["median_ms"] / cudnn["median_ms"]
    if not ratios:
        return {}
    values = list(ratios.values())
    value = statistics.median(values)
    anchor = recs.get("backend-fa3-varlen-u1")
    out = {
        "attn_cudnn_kernel_ratio": Term(
            value,
            max(0.02, (max(values) - min(values)) / value),
            f"measured: {name} backend-fa3-varlen-u* over backend-cudnn-u* (kernels alone)",
            {k: round(v, 4) for k, v in ratios.items()},
        )
    }
    if anchor is not None:
        tflops = anchor["flops"] / (anchor["median_ms"] * 1e-3) / 1e12
        out["fa3_anchor_tflops"] = Term(tflops, 0.01, f"measured: {name} backend-fa3-varlen-u1", {})
    return out


def terms_of(data: dict[str, Any], name: str) -> dict[str, Term]:
    """Every term one mechbench file holds (sections that did not run are left out)."""
    sections = {r["section"] for r in data["records"] if "median_ms" in r}
    out: dict[str, Term] = {}
    if "ring" in sections:
        out["ring_chunk_efficiency"], out["ring_merge_ms_per_gelem"] = ring_terms(data, name)
    if "ulysses_pack" in sections:
        out["ulysses_pack_ms_per_gb"] = ulysses_pack_term(data, name)
    if any(r["name"].endswith("-fp8") and "median_ms" in r for r in data["records"]):
        out["fp8_linear_speedup"] = fp8_linear_term(data, name)
    if "vae" in sections:
        out["vae_tile_fixed_share"], out["vae_tile_area_cost"], out["vae_decode_s"] = vae_tile_terms(data, name)
    return out


def h200_terms() -> dict[str, Term]:
    """Every mechanism term of the shipped H200 profile, from the committed 2026-12-01 and -02 files (ring from
    FA3's chunks, the kernel vLLM-Omni's Hopper ring runs)."""
    mech, vae256, backends = load_mech(H200_MECH), load_mech(H200_VAE256), load_mech(H200_BACKENDS)
    efficiency, merge = ring_terms(backends, H200_BACKENDS.name)
    fixed, area, whole = vae_tile_terms(vae256, H200_VAE256.name)
    fp8 = fp8_linear_term({**mech, "records": mech["records"] + load_mech(H200_GQA)["records"]}, H200_MECH.name)
    return {
        "ring_chunk_efficiency": efficiency,
        "ring_merge_ms_per_gelem": merge,
        "ulysses_pack_ms_per_gb": ulysses_pack_term(mech, H200_MECH.name),
        "fp8_linear_speedup": fp8,
        "vae_tile_fixed_share": fixed,
        "vae_tile_area_cost": area,
        "vae_decode_s": whole,
    }


# The 2026-12-03 H200 run (issue 26; torch 2.11.0+cu130, cuDNN 9.19): the generator's seven linears as vLLM-Omni
# 0.30 runs them (q, k, v, o, gate, up, down), whole and at TP shards; README.md in profiles/measured says more
H200_TP = MEASURED_DIR / "H200-1gpu-2026-12-03.mechbench-tp.json"
TP_OPS = ("q", "k", "v", "o", "gate", "up", "down")


def gemm_rate_term(path: Path = H200_TP) -> Term:
    """The GEMMs alone: the seven unsharded linears' FLOP rate at the anchor's 44,160 tokens, BF16 (TFLOP/s; sigma
    the spread of the same linears at a Ulysses rank's token counts, u2/u4/u8, around it)."""
    recs = _by_name(load_mech(path))

    def rate(prefix: str) -> float:
        names = [f"{prefix}-{op}-bf16" for op in TP_OPS]
        return float(sum(recs[n]["flops"] for n in names) / sum(recs[n]["median_ms"] for n in names) / 1e9)

    whole = rate("tp1")
    detail = {f"u{u}": round(rate(f"u{u}"), 1) for u in (2, 4, 8)}
    sigma = max(abs(v / whole - 1) for v in detail.values())
    return Term(whole, max(0.01, sigma), f"measured: {path.name} tp1-{{q,k,v,o,gate,up,down}}-bf16", detail)
