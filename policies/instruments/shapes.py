"""The sizes an instrument runs at, read from the model: the device side of the sizes file.

Runs on a GPU node: the standard library only (no torch, no worldtune). No size is written here. The
generator's layer shape and weight count, the workload's token counts, each parallel scheme's per-layer
message sizes, the bus-byte rule, the VAE latent and its tiles, and the plans' degrees all come from the
model (tools/words/models.py, workload.py, plan.py, policies/perf_model.py) through model_sizes.py, beside
this file. Where worldtune is installed the instruments import it; on a bare GPU node they read the
JSON file it writes (`--sizes FILE`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SIZES_FORMAT = "worldtune-instrument-sizes/1"
SP_DEGREES = (2, 4, 8)  # the Ulysses / ring / TP degrees whose per-GPU shapes and message sizes are measured
VARIANTS = ("full", "tiny", "step-tiny")  # the model at the anchor; the toy shapes of CPU tests (model_sizes.py)


@dataclass(frozen=True)
class LayerShape:
    """One generator layer as the instruments build it (its dimensions come from the model's TowerShape)."""

    hidden: int
    q_heads: int
    kv_heads: int
    head_dim: int
    ffn: int

    @property
    def q_dim(self) -> int:
        return self.q_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def matrices(self) -> tuple[tuple[int, int], ...]:
        """(rows, cols) of the weights built: fused q/k/v, output, fused SwiGLU gate/up, down (weight x input)."""
        q, kv, h, f = self.q_dim, self.kv_dim, self.hidden, self.ffn
        return (q + 2 * kv, h), (h, q), (2 * f, h), (h, f)

    @property
    def params(self) -> int:
        """Weights built for this layer (or one TP rank's slice of it); Sizes checks it against the model's."""
        return sum(rows * cols for rows, cols in self.matrices)


@dataclass(frozen=True)
class CollectiveCase:
    """One collective at one per-rank buffer size, and the scheme whose per-layer traffic it is."""

    name: str
    collective: str  # "a2a" | "allreduce" | "allgather" (the Profile's bandwidth keys)
    buffer_bytes: int  # all_to_all_single in/out, all_reduce tensor, all_gather_into_tensor output
    scheme: str  # e.g. "ulysses4 q/k/v scatter", "size sweep", "latency probe"


@dataclass(frozen=True)
class Sizes:
    """What an instrument runs at: one variant of the sizes file."""

    variant: str
    source: str  # where the numbers came from (the model imported, or the file)
    layer: LayerShape
    video_tokens: int  # per CFG branch
    prompt_tokens: int  # keys every video token also attends to
    layers: int  # the model's layers: a whole step is reported at this many
    latent_channels: int  # per token: what the CFG gather moves and a step predicts
    latent: tuple[int, int, int]  # VAE latent frames, height, width
    vae_tile: tuple[int, int]  # the tiled decode's tile and stride, in latent pixels
    vae_tiles: tuple[tuple[int, int], ...]  # height x width of every tile of the latent
    cases: tuple[CollectiveCase, ...]  # each scheme's per-layer message sizes
    bus_factors: Mapping[str, Mapping[int, float]]  # collective -> ranks -> bus bytes per buffer byte
    plans: Mapping[str, Mapping[str, Any]]  # plan text -> degrees, parsed by tools/words/plan.py (generator step)

    @property
    def keys(self) -> int:
        return self.video_tokens + self.prompt_tokens

    @property
    def tiny(self) -> bool:
        return self.variant != "full"

    def case(self, name: str) -> CollectiveCase:
        for case in self.cases:
            if case.name == name:
                return case
        raise KeyError(f"{name!r}: not a per-layer case of the sizes file ({', '.join(c.name for c in self.cases)})")

    def bus_bytes(self, collective: str, buffer_bytes: float, world: int) -> float:
        """Bytes each of `world` ranks puts on the links (the model's bus-bandwidth rule, as the Profile reads it)."""
        if collective not in self.bus_factors:
            raise ValueError(f"collective={collective!r}: expected one of {', '.join(self.bus_factors)}")
        factors = self.bus_factors[collective]
        if world not in factors:
            raise ValueError(f"world={world}: the sizes file has bus factors for {min(factors)}-{max(factors)} ranks")
        return buffer_bytes * factors[world]


def from_document(doc: Mapping[str, Any], variant: str, source: str) -> Sizes:
    """One variant of a sizes document (what model_sizes.document() returns and writes)."""
    if doc.get("format") != SIZES_FORMAT:
        raise ValueError(f"{source}: not a sizes file (format {doc.get('format')!r}, expected {SIZES_FORMAT!r})")
    if variant not in doc["variants"]:
        raise ValueError(f"{source}: no {variant!r} sizes in it (it has {', '.join(doc['variants'])})")
    v = doc["variants"][variant]
    layer = LayerShape(**v["layer"])
    if layer.params != v["layer_params"]:  # the matrices built here against the model's weight count
        raise ValueError(
            f"{source}: the layer built from {v['layer']} has {layer.params} weights, the model's has "
            f"{v['layer_params']}"
        )
    return Sizes(
        variant=variant,
        source=source,
        layer=layer,
        video_tokens=int(v["video_tokens"]),
        prompt_tokens=int(v["prompt_tokens"]),
        layers=int(v["layers"]),
        latent_channels=int(v["latent_channels"]),
        latent=(int(v["latent"][0]), int(v["latent"][1]), int(v["latent"][2])),
        vae_tile=(int(v["vae_tile"][0]), int(v["vae_tile"][1])),
        vae_tiles=tuple((int(h), int(w)) for h, w in v["vae_tiles"]),
        cases=tuple(CollectiveCase(**c) for c in v["cases"]),
        bus_factors={c: {int(w): float(f) for w, f in by.items()} for c, by in doc["bus_factors"].items()},
        plans=dict(doc.get("plans", {})),
    )


def read(path: str | Path, variant: str) -> Sizes:
    """A sizes file written where worldtune is installed (`python -m worldtune.policies.instruments.model_sizes`)."""
    file = Path(path)
    return from_document(json.loads(file.read_text()), variant, f"sizes file {file.name}")


def record(sizes: Sizes) -> dict[str, Any]:
    """The sizes as a raw file records them: the layer, the token counts, the layers, the weights per layer."""
    layer = sizes.layer
    dims = {"hidden": layer.hidden, "q_heads": layer.q_heads, "kv_heads": layer.kv_heads}
    dims |= {"head_dim": layer.head_dim, "ffn": layer.ffn}
    return {
        **dims,
        "video_tokens": sizes.video_tokens,
        "prompt_tokens": sizes.prompt_tokens,
        "layers": sizes.layers,
        "layer_params": layer.params,
        "from": sizes.source,
    }
