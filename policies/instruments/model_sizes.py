"""The instruments' sizes, computed from the model: the local side of the sizes file (runs here, needs worldtune).

Every number the instruments run at is read from the model's own definitions: the generator's TowerShape and
its weight count (tools/words/models.py), the anchor workload's token counts (tools/words/workload.py), the per-layer
message sizes of Ulysses, TP, HSDP and CFG and the bus-byte rule (policies/perf_model.py), the VAE latent and
its tiled-decode tiles (perf_model.vae_latent, vae_tile_shapes), and the plans' degrees (tools/words/plan.py's
Plan.parse). The instruments import this module where worldtune is installed; for a bare GPU node it writes
the same numbers as JSON, which the instruments take with `--sizes FILE`:

    .venv/bin/python -m worldtune.policies.instruments.model_sizes --out sizes.json [--plans cfg2-u4-hsdp8,tp8]

The toy shapes (`tiny`, `step-tiny`) are the same structure at CPU size, run through the same formulas.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worldtune.policies import perf_model
from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.models import TowerShape, get_model
from worldtune.tools.words.plan import Plan
from worldtune.tools.words.workload import anchor_workload

from .shapes import SIZES_FORMAT, SP_DEGREES, VARIANTS

MAX_RANKS = 8  # bus factors are written for 1..8 ranks: one node
COLLECTIVES = ("a2a", "allreduce", "allgather")
STEP_GRAMMAR = "tokens tpN, cfgN (N=1,2), uN, hsdpN joined by '-', or 1gpu (e.g. cfg2-u4-hsdp8, tp8)"
# The plans a written file carries when none are named: the generator-step runs the docs show.
STEP_PLANS = (
    "1gpu",
    "cfg2",
    "u2",
    "tp2",
    "hsdp2",
    "cfg2-hsdp2",
    "cfg2-u2",
    "u4",
    "tp4",
    "cfg2-tp2",
    "u2-hsdp2",
    "cfg2-u2-hsdp4",
    "cfg2-u4",
    "u8",
    "tp8",
    "cfg2-u4-hsdp8",
)


@dataclass(frozen=True)
class Toy:
    """A toy size for CPU tests and CI: every code path of an instrument, seconds of work."""

    tower: TowerShape
    video_tokens: int
    prompt_tokens: int
    latent: tuple[int, int, int]


TOYS = {
    "tiny": Toy(TowerShape(layers=2, hidden=256, q_heads=8, kv_heads=2, head_dim=32, ffn=512), 552, 64, (3, 10, 14)),
    # the generator step's toy: 8 KV heads as the real model has (Ulysses/TP 2, 4 and 8 all split them); a step
    # is scaled to the model's 64 layers
    "step-tiny": Toy(
        TowerShape(layers=64, hidden=128, q_heads=16, kv_heads=8, head_dim=8, ffn=256), 96, 16, (3, 10, 14)
    ),
}


def scheme_cases(tower: TowerShape, tokens: int) -> list[dict[str, Any]]:
    """Each scheme's per-layer message at the SP degrees measured, as perf_model.step_breakdown charges it."""
    cases = []

    def case(name: str, collective: str, buffer_bytes: int, scheme: str) -> None:
        cases.append({"name": name, "collective": collective, "buffer_bytes": buffer_bytes, "scheme": scheme})

    for degree in SP_DEGREES:
        qkv, out = perf_model.ulysses_bytes(tower, math.ceil(tokens / degree))
        case(f"a2a-u{degree}-qkv", "a2a", qkv, f"ulysses{degree} q/k/v scatter")
        case(f"a2a-u{degree}-out", "a2a", out, f"ulysses{degree} output gather")
    for sp in (1, *SP_DEGREES[:2]):
        label = "tp (no sequence parallel)" if sp == 1 else f"tp with sequence parallel {sp}"
        case(f"allreduce-sp{sp}", "allreduce", perf_model.tp_allreduce_bytes(tower, math.ceil(tokens / sp)), label)
    case("allgather-hsdp-bf16", "allgather", perf_model.hsdp_gather_bytes(tower), "hsdp layer (bf16)")
    case("allgather-hsdp-fp8", "allgather", perf_model.hsdp_gather_bytes(tower, fp8=True), "hsdp layer (fp8)")
    case("allgather-cfg", "allgather", perf_model.cfg_gather_bytes(tokens), "cfg latent gather")
    return cases


def variant(name: str, model: str = "cosmos3-super") -> dict[str, Any]:
    """One variant's sizes: `full` is the model at its anchor workload, the others are TOYS."""
    if name == "full":
        wl = anchor_workload(model)
        toy = Toy(get_model(model).generator, wl.video_tokens, wl.prompt_tokens, perf_model.vae_latent(wl))
    elif name in TOYS:
        toy = TOYS[name]
    else:
        raise InvalidInput("variant", name, f"one of {', '.join(VARIANTS)}")
    t = toy.tower
    _, latent_h, latent_w = toy.latent
    return {
        "layer": {
            "hidden": t.hidden,
            "q_heads": t.q_heads,
            "kv_heads": t.kv_heads,
            "head_dim": t.head_dim,
            "ffn": t.ffn,
        },
        "layer_params": t.params_per_layer,
        "layers": t.layers,
        "video_tokens": toy.video_tokens,
        "prompt_tokens": toy.prompt_tokens,
        "latent_channels": perf_model.LATENT_CHANNELS,
        "latent": list(toy.latent),
        "vae_tile": [perf_model.VAE_TILE_LATENT, perf_model.VAE_TILE_STRIDE],
        "vae_tiles": [list(tile) for tile in perf_model.vae_tile_shapes(latent_h, latent_w)],
        "cases": scheme_cases(t, toy.video_tokens),
    }


def step_plan(text: str) -> dict[str, Any]:
    """A plan parsed by tools/words/plan.py, as the generator step runs it: its name, world and degrees; the tokens a
    step has no part of (ring, VAE patch, FP8, an attention backend, replicas) are refused."""
    try:
        plan = Plan.parse(text)
    except InvalidInput as exc:
        raise ValueError(
            f"plan={text!r}: bad or repeated token ({exc.hint or exc.expected}); a generator step takes {STEP_GRAMMAR}"
        ) from exc
    extra = {"rN": plan.ring > 1, "vaeN": plan.vae > 1, "fp8": plan.fp8, plan.attn: plan.attn != "auto"}
    extra["Nx"] = plan.replicas > 1
    if any(extra.values()):
        tokens = ", ".join(k for k, v in extra.items() if v)
        raise ValueError(
            f"plan={text!r}: bad or repeated token for a generator step ({tokens}: it has no ring, VAE "
            f"patch, FP8, backend or replica dimension); it takes {STEP_GRAMMAR}"
        )
    return {
        "name": str(plan),
        "world": plan.world_size,
        "cfg": plan.cfg,
        "ulysses": plan.ulysses,
        "tp": plan.tp,
        "hsdp": plan.hsdp,
    }


def document(
    variants: Iterable[str] = VARIANTS, plans: Iterable[str] = (), model: str = "cosmos3-super"
) -> dict[str, Any]:
    """The sizes file: the variants, the bus-byte rule for 1..MAX_RANKS ranks, and the plans (keyed by the text
    given and by the plan's own name)."""
    parsed: dict[str, dict[str, Any]] = {}
    for text in plans:
        degrees = step_plan(text)
        parsed[text.strip().lower()] = parsed[degrees["name"]] = degrees
    return {
        "format": SIZES_FORMAT,
        "source": f"worldtune's model of {model} (tools/words/models.py, workload.py, policies/perf_model.py)",
        "variants": {name: variant(name, model) for name in variants},
        "bus_factors": {
            c: {str(w): perf_model.bus_bytes(c, 1.0, w) for w in range(1, MAX_RANKS + 1)} for c in COLLECTIVES
        },
        "plans": parsed,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", required=True, help="the sizes JSON file to write (give it to an instrument: --sizes)")
    parser.add_argument("--plans", default=",".join(STEP_PLANS), help="generator-step plans to carry, comma-separated")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"which of {', '.join(VARIANTS)}")
    args = parser.parse_args(argv)
    try:
        doc = document(args.variants.split(","), [p for p in args.plans.split(",") if p.strip()])
    except ValueError as exc:
        parser.error(str(exc))
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out}: {', '.join(doc['variants'])}; {len({p['name'] for p in doc['plans'].values()})} plans")
    return 0


if __name__ == "__main__":
    sys.exit(main())
