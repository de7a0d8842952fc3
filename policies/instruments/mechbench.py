"""GPU micro-benchmarks of the mechanisms the performance model credits: ring, Ulysses packing, FP8, SDPA, VAE.

Runs on a GPU node: PyTorch and the standard library. The shapes are the model's, read as microbench.py reads
them (the model where worldtune is installed, else `--sizes FILE`):

    python3 policies/instruments/mechbench.py --out mech.json [--tiny] [--device cpu|cuda] [--sections ring,vae]

(`microbench.py --mechanisms` runs the same after its own sections.) At Cosmos3-Super's per-GPU shapes
(64 query heads x 128, 8 KV heads, 44,160 video + 4,096 prompt tokens per CFG branch) it times:
- ring attention's compute (mech_attention.py): a GPU's queries against the keys in r chunks (the prompt keys
  ride with the first), each chunk by SDPA with its log-sum-exp, merged unfused; against one SDPA call of the
  same FLOPs, and the chunks alone without the merge, for u2-r2, u4-r2, r2, r4, r8 and each fused SDPA backend
  that returns an LSE;
- Ulysses' head packing around its two all-to-alls (the permute-to-contiguous copies of q/k/v and the output);
- FP8 GEMM (mech_fp8.py: `torch._scaled_mm`, e4m3, per-tensor scales, BF16 out) against BF16 at the
  generator's linear shapes and per-GPU token counts, plus the activation quantisation a real FP8 linear pays;
- every SDPA backend PyTorch has (math at a reduced shape: its scores would not fit at the anchor);
- a Wan-2.1-style 3D causal VAE decoder (vae_standin.py) with random weights at 720p x 189 frames (latent
  16 x 48 x 45 x 80, decoded one latent frame at a time with cached causal convolutions, a 2x2 unpatchify at
  the end): whole, each tile size of vLLM-Omni's tiled decode (the model's tiles: latent tile 16, stride 12),
  and one of 2/4/8 spatial patches with the halo vLLM-Omni's patch decode adds (max(tile overlap / 2, half
  the core's short side)).
Records are written after every section, so a timeout keeps what ran.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

if not __package__:  # run as a file (a bare GPU node): this folder is the package `instruments`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "instruments"

from . import devkit, mech_attention, mech_fp8, vae_standin
from .devkit import torch_module
from .shapes import Sizes

MECH_FORMAT = "worldtune-gpu-mechbench/1"
VAE_PATCHES = (2, 4, 8)
VAE_BASE = {"full": 96, "tiny": 8}  # the stand-in decoder's width (Wan 2.1: 96); the toy's


@dataclass(frozen=True)
class MechSizes:
    """The shapes the mechanisms run at, flat: one variant of the model's sizes and the stand-in decoder's width."""

    q_heads: int
    kv_heads: int
    head_dim: int
    hidden: int
    ffn: int
    video_tokens: int
    prompt_tokens: int
    latent: tuple[int, int, int]  # latent frames, height, width (16x spatial, 4x temporal)
    vae_base: int  # decoder width (Wan 2.1: 96)
    vae_tile: tuple[int, int]  # the tiled decode's tile and stride (latent pixels)
    vae_tiles: tuple[tuple[int, int], ...]  # every tile of the latent, height x width

    @classmethod
    def of(cls, sizes: Sizes, vae_base: int = 0) -> MechSizes:
        layer = sizes.layer
        base = vae_base or VAE_BASE["full" if sizes.variant == "full" else "tiny"]
        return cls(
            layer.q_heads,
            layer.kv_heads,
            layer.head_dim,
            layer.hidden,
            layer.ffn,
            sizes.video_tokens,
            sizes.prompt_tokens,
            sizes.latent,
            base,
            sizes.vae_tile,
            sizes.vae_tiles,
        )


def __getattr__(name: str) -> MechSizes:
    """FULL and TINY: the model's sizes (at the anchor; the toy), read when first asked for (PEP 562)."""
    if name in ("FULL", "TINY"):
        return MechSizes.of(devkit.sizes_for(None, "tiny" if name == "TINY" else "full"))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
            torch_module().cuda.empty_cache()

    def backends(self) -> list[str]:
        return ["math"] if self.device.type == "cpu" else ["cudnn", "flash", "efficient"]

    def timed(self, fn: Callable[[], object]) -> list[float]:
        return devkit.time_synced(fn, self.device, self.warmup, self.reps)


# ---- the VAE decode (the stand-in decoder lives in vae_standin.py) --------------------------------------------
def vae_section(bench: Mech, reps: int) -> None:
    """Whole decode, each tile size of the tiled decode, and the largest patch of 2/4/8 with its halo."""
    torch, s, vae = torch_module(), bench.s, vae_standin
    frames, lh, lw = s.latent
    decoder = vae.build_decoder(s.vae_base, bench.device)
    z = torch.randn(1, 16, frames, lh, lw, device=bench.device, dtype=torch.bfloat16)
    warm = vae.vae_decode(decoder, z[:, :, :2])  # warm-up (kernels, caches)
    cases: list[tuple[str, int, int]] = [("whole", lh, lw)]
    for h, w in sorted(set(s.vae_tiles)):
        cases.append((f"tile-{h}x{w}", h, w))
    for pp in VAE_PATCHES:
        h, w = vae.patch_with_halo(lh, lw, pp, *s.vae_tile)
        cases.append((f"patch{pp}-{h}x{w}", h, w))
    for label, h, w in cases:
        times = devkit.time_synced(
            functools.partial(vae.vae_decode, decoder, z[:, :, :, :h, :w]), bench.device, 0, reps
        )
        rec = bench.record("vae", f"vae-{label}", times, latent_h=h, latent_w=w, frames=frames)
        rec["area_share"] = h * w / (lh * lw)
    rec = bench.records[-len(cases)]
    rec["output_shape_two_latent_frames"] = list(warm.shape)  # 1 + 4 frames at 16x
    if bench.device.type == "cuda":
        rec["peak_gib"] = torch.cuda.max_memory_allocated(bench.device) / 2**30
    codes = [h * 1000 + w for h, w in s.vae_tiles]
    rec["tile_counts"] = {str(c): codes.count(c) for c in set(codes)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    torch = torch_module()
    device = torch.device(args.device)
    sizes = MechSizes.of(devkit.sizes_for(args.sizes_file, "tiny" if args.tiny else "full"), args.vae_base)
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
        "sizes": asdict(sizes),
        "records": bench.records,
        "complete": False,
    }
    sections: list[tuple[str, Callable[[], None]]] = [
        ("sdpa backends", functools.partial(mech_attention.sdpa_backends, bench)),
        ("ring: chunked attention + LSE merge", functools.partial(mech_attention.ring, bench)),
        ("ulysses pack/unpack", functools.partial(mech_attention.ulysses_pack, bench)),
        ("fp8 gemm", functools.partial(mech_fp8.fp8, bench)),
        ("gqa sdpa as vLLM-Omni calls it", functools.partial(mech_attention.gqa, bench)),
        ("quant one-pass", functools.partial(mech_fp8.fp8_quant_one_pass, bench)),
        ("backends as vLLM-Omni calls them", functools.partial(mech_attention.vllm_backends, bench)),
        ("vae decode", functools.partial(vae_section, bench, args.vae_reps)),
    ]
    wanted = set(args.sections.split(",")) if args.sections else None
    sections = [(t, f) for t, f in sections if wanted is None or t.split()[0].rstrip(":") in wanted]
    for title, section in sections:
        print(f"== {title}", flush=True)
        started = time.time()
        section()
        data.setdefault("section_s", {})[title] = round(time.time() - started, 1)
        devkit.write_json(out, data)
    data["complete"] = True
    devkit.write_json(out, data)
    print(f"wrote {out}", flush=True)
    return data


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--sizes", dest="sizes_file", help="a sizes file (model_sizes.py); default: the model itself")
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
