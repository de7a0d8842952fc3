"""The generator step's plan and weights: which ranks form which groups, and what each rank holds.

Runs on a GPU node: PyTorch and the standard library (part of generator_step.py's run). A plan's degrees are
tools/words/plan.py's: parsed by Plan.parse where worldtune is installed (through model_sizes.step_plan), else read
from the sizes file, which carries the plans parsed there. What the step itself can run is checked here.
Rank layout, as vLLM-Omni's: rank = (cfg_index x U + ulysses_index) x T + tp_index; HSDP shards over
consecutive blocks of N ranks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .devkit import MAKE_SIZES, torch_module
from .shapes import LayerShape, Sizes


@dataclass(frozen=True)
class StepPlan:
    """The parallel degrees of one generator step; `world` ranks run it (tools/words/plan.py's world_size)."""

    name: str
    world: int = 1
    cfg: int = 1
    ulysses: int = 1
    tp: int = 1
    hsdp: int = 0

    def coords(self, rank: int) -> tuple[int, int, int]:
        """(cfg index, Ulysses index, TP index) of a rank."""
        # a standalone HSDP plan (hsdpN alone) replicates the whole step on every rank: all coordinates 0
        return rank // (self.ulysses * self.tp) % self.cfg, rank // self.tp % self.ulysses, rank % self.tp

    def rank_of(self, c: int, u: int, t: int) -> int:
        return (c * self.ulysses + u) * self.tp + t

    def groups(self) -> dict[str, list[list[int]]]:
        """Every group of every dimension (all ranks must create all of them, in this order)."""
        w, ranks = self.world, range(self.world)
        c_, u_, t_ = self.cfg, self.ulysses, self.tp
        out = {
            "tp": [[self.rank_of(c, u, t) for t in range(t_)] for c in range(c_) for u in range(u_)],
            "ulysses": [[self.rank_of(c, u, t) for u in range(u_)] for c in range(c_) for t in range(t_)],
            "cfg": [[self.rank_of(c, u, t) for c in range(c_)] for u in range(u_) for t in range(t_)],
            "hsdp": [list(ranks[i : i + self.hsdp]) for i in range(0, w, self.hsdp)] if self.hsdp else [],
        }
        return {k: v for k, v in out.items() if v and len(v[0]) > 1}


def _degrees(text: str, sizes: Sizes) -> dict[str, Any]:
    """The plan's name, world and degrees: parsed by tools/words/plan.py here, else as the sizes file carries them."""
    try:
        from .model_sizes import step_plan  # the local side: needs worldtune
    except ImportError:
        found = sizes.plans.get(text.strip().lower())
        if found is None:
            raise ValueError(
                f"plan={text!r}: not in the sizes file ({sizes.source}) and worldtune is not importable here to "
                f"parse it; make the file where it is: `{MAKE_SIZES} --plans {text}`"
            ) from None
        return dict(found)
    return step_plan(text)


def parse_plan(text: str, sizes: Sizes) -> StepPlan:
    """A plan string as tools/words/plan.py parses it, checked against what the step runs and against the shapes."""
    plan = StepPlan(**_degrees(text, sizes))
    layer = sizes.layer
    problems = []
    if plan.cfg > 2:
        problems.append("cfg is 1 or 2 (two CFG branches)")
    if plan.hsdp == 1:
        problems.append("hsdp shards over 2 or more ranks")
    if plan.hsdp and plan.tp > 1:
        problems.append("hsdp cannot be combined with tp (vLLM-Omni's rule)")
    if plan.hsdp and plan.world % plan.hsdp:
        problems.append(f"hsdp{plan.hsdp} must divide the world of {plan.world}")
    for name, degree in (("u", plan.ulysses), ("tp", plan.tp)):
        if layer.kv_heads % degree or layer.q_heads % degree or sizes.video_tokens % degree:
            problems.append(f"{name}{degree} must divide the {layer.kv_heads} KV heads and the token count")
    if layer.ffn % plan.tp:
        problems.append(f"tp{plan.tp} must divide the FFN width {layer.ffn}")
    if problems:
        raise ValueError(f"plan={text!r}: " + "; ".join(problems))
    return plan


# ---- weights ------------------------------------------------------------------------------------------------
def weight_views(shape: LayerShape, flat: Any) -> tuple[Any, Any, Any, Any]:
    """w_qkv (q+2kv, hidden), w_o (hidden, q), w_gate_up (2 ffn, hidden), w_down (hidden, ffn) of a flat buffer
    holding `shape.params` weights (the whole layer or one TP rank's slice: shape.matrices, in that order)."""
    out, start = [], 0
    for rows, cols in shape.matrices:
        out.append(flat[start : start + rows * cols].view(rows, cols))
        start += rows * cols
    return out[0], out[1], out[2], out[3]


def full_layer(sizes: Sizes, index: int, seed: int, device: Any, dtype: Any) -> tuple[Any, Any]:
    """Layer `index`'s full weights (flat, weight_views order) and its prompt K/V per CFG branch (2, 2, P, kv, D),
    from a seed every rank shares, so every plan computes the same function."""
    torch = torch_module()

    layer = sizes.layer
    gen = torch.Generator(device=device)
    gen.manual_seed(seed * 1009 + index)
    flat = torch.empty(layer.params, device=device, dtype=dtype)
    for w in weight_views(layer, flat):
        # 1/sqrt(fan-in) keeps the residual stream's scale steady over many layers
        w.copy_(torch.randn(w.shape, generator=gen, device=device, dtype=dtype) / math.sqrt(w.shape[1]))
    prompt_kv = torch.randn(
        (2, 2, sizes.prompt_tokens, layer.kv_heads, layer.head_dim), generator=gen, device=device, dtype=dtype
    )
    return flat, prompt_kv


def tp_slice(flat: Any, sizes: Sizes, tp: int, index: int) -> Any:
    """The TP rank's columns of q/k/v and gate/up and rows of o and down, as one flat buffer."""
    torch = torch_module()

    layer = sizes.layer
    w_qkv, w_o, w_gate_up, w_down = weight_views(layer, flat)
    q, kv, f = layer.q_dim, layer.kv_dim, layer.ffn
    qs, kvs, fs = q // tp, kv // tp, f // tp
    qkv = torch.cat(
        [
            w_qkv[index * qs : (index + 1) * qs],
            w_qkv[q + index * kvs : q + (index + 1) * kvs],
            w_qkv[q + kv + index * kvs : q + kv + (index + 1) * kvs],
        ]
    )
    gate_up = torch.cat([w_gate_up[index * fs : (index + 1) * fs], w_gate_up[f + index * fs : f + (index + 1) * fs]])
    parts = [qkv, w_o[:, index * qs : (index + 1) * qs], gate_up, w_down[:, index * fs : (index + 1) * fs]]
    return torch.cat([p.reshape(-1) for p in parts])
