"""Plan rules of vLLM-Omni 0.30 for Cosmos 3, and the memory fit; every refusal names a valid alternative.

The rules follow vLLM-Omni's DiffusionParallelConfig and the Cosmos 3 pipeline: world size is
T x (U x R) x C; HSDP (FSDP2) excludes tensor parallel; with HSDP, replicate x shard equals the world;
CFG parallel is 1 or 2 and needs two guidance branches (distilled checkpoints refuse it); Ulysses in
strict mode and TP must divide the head counts; a replica lives on one node; and the weights,
buffers, activations and VAE workspace must fit each GPU's memory.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from worldtune.tools.words.gpus import GpuSpec
from worldtune.tools.words.memory import memory_breakdown
from worldtune.tools.words.models import ModelSpec, get_model
from worldtune.tools.words.plan import ATTN_BACKENDS, Plan
from worldtune.tools.words.profile import Profile
from worldtune.tools.words.workload import Workload

MEMORY_EDGE = 0.9  # above this share of a GPU's memory a plan runs "at the edge"
BLACKWELL = {"B200", "B300", "GB200", "GB300"}  # compute capability 10.x: no FA2/FA3 kernels


@dataclass(frozen=True)
class Verdict:
    """Whether vLLM-Omni would accept a plan on a GPU type, and why not."""

    valid: bool
    rule: str = ""
    reason: str = ""
    alternative: str = ""
    warning: str = ""

    @property
    def message(self) -> str:
        if self.valid:
            return self.warning or "ok"
        text = f"{self.rule}: {self.reason}"
        return f"{text}; try {self.alternative}" if self.alternative else text


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _structural(plan: Plan, spec: ModelSpec, workload: Workload, gpu: GpuSpec, node_gpus: int) -> Verdict | None:
    """The first structural rule the plan breaks (memory aside), or None."""
    g = spec.generator
    if plan.hsdp and plan.tp > 1:
        return Verdict(
            False,
            "hsdp-exclusive",
            f"HSDP (FSDP2) is not compatible with tensor parallel (tp={plan.tp}, hsdp={plan.hsdp})",
        )
    if plan.hsdp and plan.parallel_product > 1 and plan.parallel_product % plan.hsdp:
        return Verdict(
            False,
            "hsdp-size",
            f"HSDP replicate x shard must equal the world size {plan.parallel_product}; "
            f"shard {plan.hsdp} does not divide it",
        )
    if plan.cfg > 2:
        return Verdict(False, "cfg-size", f"CFG parallel size is 1 or 2 (got cfg={plan.cfg})")
    if plan.cfg == 2 and spec.distilled:
        return Verdict(
            False,
            "cfg-distilled",
            f"{spec.hf_id} is a distilled checkpoint: it forces guidance 1.0 and refuses CFG parallel",
        )
    if plan.cfg == 2 and workload.cfg_branches == 1:
        return Verdict(
            False,
            "cfg-guidance",
            f"CFG parallel needs two guidance branches; guidance_scale={workload.guidance_scale} runs one",
        )
    heads_ok = [d for d in _divisors(g.kv_heads) if g.q_heads % d == 0]
    if plan.ulysses > 1 and plan.ulysses not in heads_ok:
        return Verdict(
            False,
            "ulysses-heads",
            f"Ulysses strict mode needs the degree to divide {g.kv_heads} KV and {g.q_heads} query heads "
            f"(u={plan.ulysses}; valid: {', '.join(map(str, heads_ok))})",
        )
    if plan.tp > 1 and plan.tp not in heads_ok:
        return Verdict(
            False,
            "tp-heads",
            f"tensor parallel must divide {g.kv_heads} KV heads (tp={plan.tp}; valid: {', '.join(map(str, heads_ok))})",
        )
    if plan.world_size > gpu.max_gpus_per_node:
        return Verdict(
            False,
            "world-size",
            f"one replica needs {plan.world_size} GPUs; a {gpu.name} node has at most {gpu.max_gpus_per_node}",
        )
    if plan.gpus > node_gpus:
        return Verdict(
            False,
            "gpus-per-node",
            f"{plan.replicas} replica(s) x {plan.world_size} GPUs = {plan.gpus} GPUs > {node_gpus} on the node",
        )
    if plan.vae > plan.world_size:
        return Verdict(
            False,
            "vae-size",
            f"VAE patch parallel size {plan.vae} exceeds the replica's {plan.world_size} GPUs "
            "(vLLM-Omni would silently use fewer)",
        )
    backend = _backend_rule(plan, gpu)
    if backend is not None:
        return backend
    if plan.sequence_parallel > workload.video_tokens:
        return Verdict(
            False,
            "sequence-size",
            f"{plan.sequence_parallel}-way sequence split of {workload.video_tokens} tokens",
        )
    return None


def _backend_rule(plan: Plan, gpu: GpuSpec) -> Verdict | None:
    """Attention-kernel limits of vLLM-Omni 0.30 (diffusion/attention/parallel/ring.py, platforms/cuda/platform.py)."""
    if plan.ring > 1 and plan.attn in ("cudnn", "fi"):
        return Verdict(
            False,
            "ring-backend",
            f"ring attention has no {plan.attn} kernel: with --diffusion-attention-backend "
            f"{ATTN_BACKENDS[plan.attn]} vLLM-Omni 0.30 refuses ring (r={plan.ring}); drop the backend token",
        )
    if gpu.name in BLACKWELL and plan.ring > 1:
        # issue 5611: the pinned fa3-fwd 0.0.3 and FA2 ship no sm_100 kernels and FA4 is the optional
        # vllm-omni[fa4]; ring then falls back to PyTorch's mem-efficient SDPA ring (~0.3x the rate) or refuses.
        # 0.32.0rc1 adds vLLM's bundled FA dispatcher to ring (parallel/ring.py _can_use_vllm_flash_attn), which
        # may lift this there; not verified on a B200
        return Verdict(
            False,
            "ring-blackwell",
            f"vLLM-Omni 0.30 has no ring kernel for {gpu.name} in its default install (FA2/FA3 are Hopper-only, "
            f"FA4 is vllm-omni's optional fa4 extra; issue 5611): r={plan.ring} falls back to a slow SDPA ring "
            "or fails",
        )
    if gpu.name in BLACKWELL and plan.attn == "fa":
        return Verdict(
            False,
            "fa-blackwell",
            f"FLASH_ATTN on {gpu.name} needs CuTe FlashAttention-4 (vllm-omni's fa4 extra); "
            "vLLM-Omni 0.30 refuses it without",
        )
    return None


def check(
    plan: Plan,
    workload: Workload,
    gpu: GpuSpec,
    profile: Profile,
    node_gpus: int | None = None,
    suggest: bool = True,
    pool: list[Plan] | None = None,
) -> Verdict:
    """Would vLLM-Omni 0.30 accept this plan for this workload on this GPU type, and does it fit?"""
    spec = get_model(workload.model)
    node = node_gpus or gpu.max_gpus_per_node
    verdict = _structural(plan, spec, workload, gpu, node)
    if verdict is None:
        memory = memory_breakdown(spec, workload, plan, profile).total_gib
        if memory > gpu.memory_gib:
            verdict = Verdict(
                False,
                "memory",
                f"needs {memory:.1f} GiB per GPU, a {gpu.name} has {gpu.memory_gib:.1f} GiB",
            )
        elif memory > MEMORY_EDGE * gpu.memory_gib:
            return Verdict(
                True,
                warning=f"at the edge of memory ({memory:.1f} of {gpu.memory_gib:.1f} GiB): "
                "set PYTORCH_ALLOC_CONF=expandable_segments:True",
            )
        else:
            return Verdict(True)
    if suggest:
        alternative = nearest_valid(plan, workload, gpu, profile, node, pool)
        if alternative is not None:
            verdict = Verdict(False, verdict.rule, verdict.reason, str(alternative))
    return verdict


def candidate_plans(gpus: int, max_world: int = 8, include_fp8: bool = True) -> Iterator[Plan]:
    """Every plan string the grammar can express that uses exactly `gpus` GPUs on one node."""
    powers = [1, 2, 4, 8]
    for world in [w for w in powers if w <= min(gpus, max_world) and gpus % w == 0]:
        replicas = gpus // world
        seen: set[str] = set()
        for cfg in (1, 2):
            for tp in powers:
                for u in powers:
                    for r in powers:
                        if tp * u * r * cfg != world:
                            continue
                        hsdp_options = [0] + [h for h in _divisors(world) if h > 1]
                        for hsdp in hsdp_options:
                            for vae in sorted({1, world}):
                                for fp8 in (False, True) if include_fp8 else (False,):
                                    plan = Plan(
                                        replicas=replicas,
                                        tp=tp,
                                        cfg=cfg,
                                        ulysses=u,
                                        ring=r,
                                        hsdp=hsdp,
                                        vae=vae,
                                        fp8=fp8,
                                    )
                                    if str(plan) not in seen:
                                        seen.add(str(plan))
                                        yield plan
        if world > 1:  # standalone HSDP: the shard size sets the world
            for fp8 in (False, True) if include_fp8 else (False,):
                plan = Plan(replicas=replicas, hsdp=world, fp8=fp8)
                if str(plan) not in seen:
                    seen.add(str(plan))
                    yield plan


def _distance(a: Plan, b: Plan) -> float:
    score = (
        (a.replicas != b.replicas)
        + (a.tp != b.tp)
        + (a.cfg != b.cfg)
        + (a.ulysses != b.ulysses)
        + (a.ring != b.ring)
        + (a.hsdp != b.hsdp)
        + (a.vae != b.vae)
    )
    return score + (0.5 if a.fp8 != b.fp8 else 0.0) + (0.5 if a.attn != b.attn else 0.0) + 0.01 * abs(a.gpus - b.gpus)


def nearest_valid(
    plan: Plan,
    workload: Workload,
    gpu: GpuSpec,
    profile: Profile,
    node_gpus: int,
    pool: list[Plan] | None = None,
) -> Plan | None:
    """The valid plan closest to `plan`: same GPU count where possible, else another count on the node.

    pool: plans already known to be valid (saves re-checking when many plans are judged at once).
    """
    counts = [plan.gpus] if plan.gpus <= node_gpus else []
    counts += [n for n in (1, 2, 4, 8) if n <= node_gpus and n not in counts]
    for count in sorted(counts, key=lambda n: (n < plan.gpus, abs(n - plan.gpus))):
        if pool is not None and count == plan.gpus:
            valid = [p for p in pool if p.gpus == count]
        else:
            valid = [
                p
                for p in candidate_plans(count, gpu.max_gpus_per_node)
                if check(p, workload, gpu, profile, node_gpus, suggest=False).valid
            ]
        if valid:
            return min(valid, key=lambda p: _distance(plan, p))  # first of equals: candidate order
    return None
