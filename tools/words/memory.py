"""Memory of a plan: the bytes one GPU holds while serving a workload (weight shards, HSDP buffers, activations,
VAE decode workspace, runtime), in GiB, and the byte sizes they are counted in.

A word: plain arithmetic over the model's shape (tools/words/models.py), the plan, the workload and the Profile's
memory numbers. The plan rules' memory fit (tools/words/plan_rules.py) and the performance model
(policies/perf_model.py) read it from here, one definition for both.
"""

from __future__ import annotations

from dataclasses import dataclass

from worldtune.tools.words.models import ANCHOR_FRAMES, ANCHOR_HEIGHT, ANCHOR_WIDTH, ModelSpec
from worldtune.tools.words.plan import Plan
from worldtune.tools.words.profile import Profile
from worldtune.tools.words.workload import Workload

BYTES_BF16 = 2
ANCHOR_PIXELS_X_FRAMES = ANCHOR_WIDTH * ANCHOR_HEIGHT * ANCHOR_FRAMES


@dataclass(frozen=True)
class MemoryBreakdown:
    """Peak memory of one GPU while serving (GiB)."""

    weights_gib: float
    hsdp_buffers_gib: float
    activations_gib: float
    vae_gib: float
    runtime_gib: float

    @property
    def total_gib(self) -> float:
        return self.weights_gib + self.hsdp_buffers_gib + self.activations_gib + self.vae_gib + self.runtime_gib


def memory_breakdown(spec: ModelSpec, workload: Workload, plan: Plan, profile: Profile) -> MemoryBreakdown:
    """Peak memory per GPU: weight shards, HSDP buffers, activations, VAE decode workspace, runtime."""
    bytes_per_param = 1 if plan.fp8 else BYTES_BF16
    tower_gib = (spec.generator_params_b + spec.reasoner_params_b) * 1e9 * bytes_per_param / 2**30
    other_gib = spec.other_params_b * 1e9 * BYTES_BF16 / 2**30
    if plan.hsdp:
        weights = tower_gib / plan.hsdp + other_gib
        layer_gib = spec.generator.params_per_layer * bytes_per_param / 2**30
        # two gathered layers in flight plus FSDP2's buffers, which grow with the shard count
        buffers = 2 * layer_gib + profile.hsdp_buffer_gib * (1 - 1 / plan.hsdp)
    else:
        weights = tower_gib / plan.tp + other_gib
        buffers = 0.0
    tokens_per_gpu = workload.video_tokens / plan.sequence_parallel
    activations = profile.activation_gib_per_ktoken * tokens_per_gpu / 1000 / max(1, plan.tp // 2)
    vae = profile.vae_decode_gib * (workload.pixels_x_frames / ANCHOR_PIXELS_X_FRAMES) / plan.vae
    return MemoryBreakdown(
        weights_gib=weights,
        hsdp_buffers_gib=buffers,
        activations_gib=activations,
        vae_gib=vae,
        runtime_gib=profile.runtime_gib,
    )
