"""A Wan-2.1-style causal 3D VAE decoder in plain PyTorch (random weights), and vLLM-Omni's patch-decode halo:
what mechbench.py times to give the VAE decode and its patch-parallel scaling a basis.

Runs on a GPU node: PyTorch and the standard library (no worldtune). The tiled decode's tiles, and the tile and
stride the halo is read from, are the model's (perf_model.vae_tile_shapes), handed over in the sizes.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from .devkit import torch_module as _torch


def build_decoder(base: int, device: Any) -> Any:
    """Wan 2.1's decoder layout (dims base x [4,4,4,2,1], 3 residual blocks a stage, mid attention, two temporal
    and three spatial 2x upsamplings) with causal 3D convolutions that cache the last two frames between calls,
    and a 2x2 unpatchify after the head (16x spatial in all, as Cosmos3's VAE)."""
    torch, nn, F = _torch(), _torch("nn"), _torch("nn.functional")
    Module: Any = nn.Module
    Conv3d: Any = nn.Conv3d

    class CausalConv3d(Conv3d):  # type: ignore[misc]
        def __init__(self, cin: int, cout: int, kt: int, ks: int) -> None:
            super().__init__(cin, cout, (kt, ks, ks), padding=(0, ks // 2, ks // 2))
            self.kt, self.cache = kt, None

        def forward(self, x: Any) -> Any:
            if self.kt > 1:
                prev = self.cache if self.cache is not None else x.new_zeros((*x.shape[:2], self.kt - 1, *x.shape[3:]))
                x = torch.cat([prev, x], dim=2)
                self.cache = x[:, :, -(self.kt - 1) :]
            return super().forward(x)

    class Norm(Module):  # type: ignore[misc]
        def __init__(self, c: int) -> None:
            super().__init__()
            self.gamma, self.scale = nn.Parameter(torch.ones(c, 1, 1, 1)), c**0.5

        def forward(self, x: Any) -> Any:
            return F.normalize(x, dim=1) * self.scale * self.gamma

    class Res(Module):  # type: ignore[misc]
        def __init__(self, cin: int, cout: int) -> None:
            super().__init__()
            self.body = nn.Sequential(Norm(cin), nn.SiLU(), CausalConv3d(cin, cout, 3, 3), Norm(cout), nn.SiLU())
            self.conv2 = CausalConv3d(cout, cout, 3, 3)
            self.short = CausalConv3d(cin, cout, 1, 1) if cin != cout else nn.Identity()

        def forward(self, x: Any) -> Any:
            return self.conv2(self.body(x)) + self.short(x)

    class Attn(Module):  # type: ignore[misc]
        def __init__(self, c: int) -> None:
            super().__init__()
            self.norm, self.qkv, self.proj = Norm(c), nn.Conv2d(c, 3 * c, 1), nn.Conv2d(c, c, 1)

        def forward(self, x: Any) -> Any:
            b, c, t, h, w = x.shape
            y = self.norm(x).permute(0, 2, 1, 3, 4).reshape(b * t, c, h, w)
            q, k, v = self.qkv(y).reshape(b * t, 3, c, h * w).permute(1, 0, 3, 2).unsqueeze(2).unbind(0)
            y = F.scaled_dot_product_attention(q, k, v).squeeze(1).transpose(1, 2).reshape(b * t, c, h, w)
            return x + self.proj(y).reshape(b, t, c, h, w).permute(0, 2, 1, 3, 4)

    class Up(Module):  # type: ignore[misc]
        def __init__(self, c: int, temporal: bool) -> None:
            super().__init__()
            self.time = CausalConv3d(c, 2 * c, 3, 1) if temporal else None
            self.conv = nn.Conv2d(c, c // 2, 3, padding=1)
            self.first = True

        def forward(self, x: Any) -> Any:
            b, c, t, h, w = x.shape
            if self.time is not None:
                if self.first:  # the first latent frame decodes to one frame (causal)
                    self.first = False
                else:
                    x = self.time(x).reshape(b, 2, c, t, h, w).permute(0, 2, 3, 1, 4, 5).reshape(b, c, 2 * t, h, w)
                    t = 2 * t
            y = x.permute(0, 2, 1, 3, 4).reshape(b * t, c, h, w)
            y = self.conv(F.interpolate(y, scale_factor=2.0, mode="nearest-exact"))
            return y.reshape(b, t, c // 2, 2 * h, 2 * w).permute(0, 2, 1, 3, 4)

    dims = [base * m for m in (4, 4, 4, 2, 1)]
    layers: list[Any] = [CausalConv3d(16, dims[0], 3, 3), Res(dims[0], dims[0]), Attn(dims[0]), Res(dims[0], dims[0])]
    for i, (din, dout) in enumerate(itertools.pairwise(dims)):
        din = din // 2 if i > 0 else din
        for _ in range(3):
            layers.append(Res(din, dout))
            din = dout
        if i < 3:
            layers.append(Up(dout, temporal=i < 2))
    layers += [Norm(dims[-1]), nn.SiLU(), CausalConv3d(dims[-1], 12, 3, 3)]
    return nn.Sequential(*layers).to(device=device, dtype=torch.bfloat16).eval()


def vae_decode(decoder: Any, z: Any) -> Any:
    """Decode latents (B, 16, T, H, W) one latent frame at a time (causal caches reset first); RGB at 16x."""
    torch = _torch()
    for m in decoder.modules():
        if hasattr(m, "cache"):
            m.cache = None
        if hasattr(m, "first"):
            m.first = True
    frames = []
    with torch.inference_mode():
        for i in range(z.shape[2]):
            y = decoder(z[:, :, i : i + 1])
            b, _, t, h, w = y.shape  # 12 = 3 RGB x 2 x 2: unpatchify
            frames.append(y.reshape(b, 3, 2, 2, t, h, w).permute(0, 1, 4, 5, 2, 6, 3).reshape(b, 3, t, 2 * h, 2 * w))
    return torch.cat(frames, dim=2)


def patch_with_halo(latent_h: int, latent_w: int, pp: int, tile: int, stride: int) -> tuple[int, int]:
    """The largest latent block one of `pp` ranks decodes in vLLM-Omni's patch decode (core + halo), with the tiled
    decode's `tile` and `stride` (latent pixels) that set the halo's least size."""
    rows = next(r for r in range(int(math.sqrt(pp)), 0, -1) if pp % r == 0)
    cols = pp // rows
    halo_base = int(tile * (1 - stride / tile)) // 2
    best = (0, 0)
    for i in range(rows):
        for j in range(cols):
            h0, h1 = i * latent_h // rows, (i + 1) * latent_h // rows
            w0, w1 = j * latent_w // cols, (j + 1) * latent_w // cols
            halo = max(halo_base, min(h1 - h0, w1 - w0) // 2)
            size = (min(latent_h, h1 + halo) - max(0, h0 - halo), min(latent_w, w1 + halo) - max(0, w0 - halo))
            best = max(best, size, key=lambda hw: hw[0] * hw[1])
    return best
