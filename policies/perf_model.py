"""The performance model: latency, per-step and fixed time, memory and throughput of a plan.

Two clocks: the server's generation time (vLLM-Omni's stage time, its X-Inference-Time-S) is
server = fixed + steps x per_step (+ guardrails); a client's end-to-end time of one sync request adds what
happens outside the engine, the API server's MP4 encode, the request and the transfer:
client = server + client overhead. `latency_s` is the client's, what a benchmark measures and goals are judged
on. Under queueing only `pipelined_s` of a request overlaps the next (vLLM-Omni 0.30 runs one request at a time
in the engine; the shipped profiles overlap the part outside it). Per step, every GPU of a replica runs its share of
the generator's linear layers and attention at the workload's token count over effective rates (the
attention backend's, FP8's where it applies), plus the communication its scheme needs (Ulysses
all-to-all and its head packing, TP all-reduce, ring K/V passing with its chunked attention, log-sum-exp
merge and per-hop sync, HSDP weight all-gather, CFG gather) over effective bus bandwidth, hidden behind
compute where the scheme allows. The fixed part's VAE decode follows vLLM-Omni's tiled decode when
patch parallel is on (tiles spread over the ranks, each with a fixed and an area cost, then gathered).
The numbers come from a Profile; nothing here is specific to one GPU type. The memory of a plan is the word
tools/words/memory.py (the plan rules' memory fit reads the same definition), re-exported here.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

from worldtune.tools.words import memory
from worldtune.tools.words.memory import (
    ANCHOR_PIXELS_X_FRAMES as ANCHOR_PIXELS_X_FRAMES,  # the memory word's, re-exported
)
from worldtune.tools.words.memory import MemoryBreakdown as MemoryBreakdown
from worldtune.tools.words.memory import memory_breakdown as memory_breakdown
from worldtune.tools.words.models import ANCHOR_FRAMES, ModelSpec, TowerShape, get_model
from worldtune.tools.words.plan import Plan
from worldtune.tools.words.prediction import Breakdown
from worldtune.tools.words.profile import Profile
from worldtune.tools.words.workload import Workload

if TYPE_CHECKING:
    import numpy as np

ANCHOR_PROMPT_TOKENS = 4096
SUPER_REASONER_B = 31.2
LATENT_CHANNELS = 64  # 16 VAE channels x 2 x 2 patch: what the CFG gather moves per token
VAE_SPATIAL = 16  # Cosmos3's Wan-family VAE: 16x per spatial side
# vLLM-Omni turns tiling on with patch parallel: diffusers' Wan tiles of 256 px every 192 px, in latent pixels
VAE_TILE_LATENT, VAE_TILE_STRIDE = 256 // VAE_SPATIAL, 192 // VAE_SPATIAL
RGB_BYTES = 3 * memory.BYTES_BF16  # what the decoded tiles gathered to rank 0 carry per pixel and frame


@dataclass(frozen=True)
class Prediction:
    """What the model predicts for one replica of a plan on one workload."""

    per_step_s: float
    fixed_s: float
    guardrail_s: float
    latency_s: float  # the client's end-to-end time of one sync request (client_s)
    service_s: float  # time a replica is busy per clip when requests queue
    server_s: float  # the server's generation time: fixed + steps x per_step + guardrail
    client_overhead_s: float  # the client's time beyond it: MP4 encode, request, transfer
    load_s: float  # warm: a later load of the model on the same node (page cache)
    memory: MemoryBreakdown
    step: Breakdown  # the word (tools/words/prediction.py): one definition of where a step's time goes
    clips_per_hour_per_replica: float
    clips_per_hour_per_node: float
    notes: list[str] = field(default_factory=list)
    cold_load_s: float = 0.0  # the first load on a node (weights from disk); 0 where not predicted

    @property
    def memory_gib_per_gpu(self) -> float:
        return self.memory.total_gib


def _rate(peak_tflops: float, tokens_per_gpu: float, profile: Profile) -> float:
    """Effective FLOP/s at a given amount of work per GPU (small work runs less efficiently)."""
    efficiency = tokens_per_gpu / (tokens_per_gpu + profile.half_rate_tokens)
    return peak_tflops * 1e12 * efficiency


def _collective_s(bytes_moved: float, collective: str, profile: Profile, calls: int = 1) -> float:
    return _transfer_s(bytes_moved, profile.collective_latency_us, profile.bandwidth(collective), calls)


def _transfer_s(bytes_moved: float, latency_us: float, bytes_per_s: float, calls: int = 1) -> float:
    """Seconds of `calls` collectives moving `bytes_moved` in all, at this latency each and this bus bandwidth."""
    return calls * latency_us * 1e-6 + bytes_moved / bytes_per_s


# ---- per-layer message sizes: the one definition (the GPU micro-benchmark times these same sizes, handed to
# it through policies/instruments/model_sizes.py) -------------------------------------------------------------
def bus_bytes(collective: str, buffer_bytes: float, world: int) -> float:
    """Bytes each of `world` GPUs puts on the links for one collective (NCCL-tests' bus-bandwidth convention, which
    the Profile's GB/s are in): an all-reduce 2(n-1)/n of its buffer, an all-to-all or all-gather (n-1)/n."""
    if collective == "allreduce":
        return buffer_bytes * 2.0 * (world - 1) / world
    if collective in ("a2a", "allgather"):
        return buffer_bytes * (world - 1) / world
    raise ValueError(f"collective={collective!r}: expected a2a, allreduce or allgather")


def ulysses_bytes(tower: TowerShape, tokens_per_gpu: int) -> tuple[int, int]:
    """One layer's Ulysses all-to-all buffers on a GPU: q/k/v scattered to head groups, the output gathered back
    (BF16; a TP rank moves 1/tp of each)."""
    q_dim, kv_dim = tower.q_heads * tower.head_dim, tower.kv_heads * tower.head_dim
    return tokens_per_gpu * (q_dim + 2 * kv_dim) * memory.BYTES_BF16, tokens_per_gpu * q_dim * memory.BYTES_BF16


def tp_allreduce_bytes(tower: TowerShape, tokens_per_gpu: int) -> int:
    """The hidden state each of TP's two all-reduces per layer sums (a GPU's tokens x hidden, BF16)."""
    return tokens_per_gpu * tower.hidden * memory.BYTES_BF16


def hsdp_gather_bytes(tower: TowerShape, fp8: bool = False) -> int:
    """One layer's weights, all-gathered from the HSDP shards before the layer runs."""
    return tower.params_per_layer * (1 if fp8 else memory.BYTES_BF16)


def cfg_gather_bytes(tokens: int) -> int:
    """Both CFG branches' predictions, all-gathered once per step (each GPU receives the other branch's half)."""
    return tokens * LATENT_CHANNELS * memory.BYTES_BF16


def step_breakdown(spec: ModelSpec, workload: Workload, plan: Plan, profile: Profile) -> Breakdown:
    """Per-step time of one replica, by component (the slowest GPU's view; all GPUs are symmetric)."""
    return _breakdown(_step_parts(spec, workload, plan, profile))


StepParts = tuple[float, float, float, float, float, float, float, float]
"""A step's seconds by component, in Breakdown's field order (linear, attention, ulysses, tp, ring, hsdp, cfg,
overhead): the search computes these for thousands of plans a decision and reads only their total."""


def _breakdown(parts: StepParts) -> Breakdown:
    linear, attention, ulysses, tp, ring, hsdp, cfg, overhead = parts
    return Breakdown.model_construct(
        linear_s=linear,
        attention_s=attention,
        ulysses_s=ulysses,
        tp_s=tp,
        ring_s=ring,
        hsdp_s=hsdp,
        cfg_s=cfg,
        overhead_s=overhead,
    )


def _step_total(parts: StepParts) -> float:
    """Breakdown.total_s of these parts, summed in its order (compute, then communication, then overhead)."""
    linear, attention, ulysses, tp, ring, hsdp, cfg, overhead = parts
    return (linear + attention) + (ulysses + tp + ring + hsdp + cfg) + overhead


@dataclass(frozen=True)
class _Shape:
    """What a step moves and computes for one (model, workload, plan), whatever the profile: the search times the
    same few shapes under ~100,000 profiles a run, so these are worked out once (the same expressions, in the same
    order, as the step's time had them inline)."""

    tokens_per_gpu: int
    linear_flops: float
    attention_flops: float
    ulysses_bus: float  # bytes of the two all-to-alls, on the bus
    ulysses_pack_gb: float  # GB the head (un)packing reads and writes
    tp_bus: float
    ring_bytes: float
    ring_merge_gelem: float
    hsdp_bus: float
    cfg_bus: float
    scale: int  # forward passes each GPU group runs per step x layers


_SHAPES: dict[tuple[int, int, int], tuple[ModelSpec, Workload, Plan, _Shape]] = {}  # ids -> (the objects, shape)


def _shape(spec: ModelSpec, workload: Workload, plan: Plan) -> _Shape:
    """The step's shape of these three frozen objects (held here, so their ids stay theirs while cached)."""
    key = (id(spec), id(workload), id(plan))
    found = _SHAPES.get(key)
    if found is not None and found[0] is spec and found[1] is workload and found[2] is plan:
        return found[3]
    if len(_SHAPES) >= 4096:
        _SHAPES.clear()
    g = spec.generator
    branches = workload.cfg_branches
    sp = plan.sequence_parallel
    tokens = workload.video_tokens
    keys = tokens + workload.prompt_tokens
    tokens_per_gpu = math.ceil(tokens / sp)
    q_dim, kv_dim = g.q_heads * g.head_dim, g.kv_heads * g.head_dim
    # q, k, v scattered to head groups before attention, the output gathered back after it
    moved = sum(ulysses_bytes(g, tokens_per_gpu)) / plan.tp if plan.ulysses > 1 else 0.0
    # two all-reduces of the hidden state per layer (after attention and after the MLP)
    tp_bus = 2 * bus_bytes("allreduce", tp_allreduce_bytes(g, tokens_per_gpu), plan.tp) if plan.tp > 1 else 0.0
    chunk = (tokens / sp) * 2 * kv_dim / plan.tp * memory.BYTES_BF16
    passes = max(1, branches // plan.cfg)  # forward passes each GPU group runs per step
    shape = _Shape(
        tokens_per_gpu=tokens_per_gpu,
        linear_flops=2.0 * tokens_per_gpu * g.params_per_layer / plan.tp,
        attention_flops=4.0 * tokens * keys * q_dim / (sp * plan.tp),
        ulysses_bus=bus_bytes("a2a", moved, plan.ulysses) if plan.ulysses > 1 else 0.0,
        ulysses_pack_gb=4 * moved / 1e9,
        tp_bus=tp_bus,
        ring_bytes=chunk * (plan.ring - 1),
        # each extra hop merges a partial output by log-sum-exp (fp32, memory-bound)
        ring_merge_gelem=(plan.ring - 1) * (tokens_per_gpu * q_dim / plan.tp) / 1e9,
        hsdp_bus=bus_bytes("allgather", hsdp_gather_bytes(g, plan.fp8), plan.hsdp) if plan.hsdp > 1 else 0.0,
        cfg_bus=bus_bytes("allgather", cfg_gather_bytes(tokens), branches) if plan.cfg > 1 and branches > 1 else 0.0,
        scale=passes * g.layers,
    )
    _SHAPES[key] = (spec, workload, plan, shape)
    return shape


def _step_parts(spec: ModelSpec, workload: Workload, plan: Plan, profile: Profile) -> StepParts:
    shape = _shape(spec, workload, plan)
    linear_rate = _rate(profile.linear_tflops, shape.tokens_per_gpu, profile)
    if plan.fp8:
        linear_rate *= profile.fp8_linear_speedup
    attention_rate = _rate(profile.attn_tflops, shape.tokens_per_gpu, profile) * attention_factor(plan, profile)
    if plan.ring > 1:
        attention_rate *= profile.ring_chunk_efficiency  # r calls over key chunks run below one call's rate
    linear_s = shape.linear_flops / linear_rate
    attention_s = shape.attention_flops / attention_rate
    compute_layer_s = linear_s + attention_s

    ulysses_s = tp_s = ring_s = hsdp_s = 0.0
    if plan.ulysses > 1:
        ulysses_s = _collective_s(shape.ulysses_bus, "a2a", profile, calls=2)
        # the head (un)packing copies around both all-to-alls: each byte read and written, before and after
        ulysses_s += shape.ulysses_pack_gb * profile.ulysses_pack_ms_per_gb * 1e-3
    if plan.tp > 1:
        tp_s = _collective_s(shape.tp_bus, "allreduce", profile, calls=2)
    if plan.ring > 1:
        ring = _collective_s(shape.ring_bytes, "a2a", profile, calls=plan.ring - 1)
        ring_s = max(ring * (1 - profile.ring_overlap), ring - attention_s)
        # each extra hop merges a partial output and waits for its chunk
        ring_s += shape.ring_merge_gelem * profile.ring_merge_ms_per_gelem * 1e-3
        ring_s += (plan.ring - 1) * profile.ring_hop_latency_us * 1e-6
    if plan.hsdp > 1:
        gather = _collective_s(shape.hsdp_bus, "allgather", profile)
        hsdp_s = max(gather * (1 - profile.hsdp_overlap), gather - compute_layer_s)
    cfg_s = 0.0
    if plan.cfg > 1 and workload.cfg_branches > 1:
        cfg_s = _collective_s(shape.cfg_bus, "allgather", profile)
    scale = shape.scale
    return (
        linear_s * scale,
        attention_s * scale,
        ulysses_s * scale,
        tp_s * scale,
        ring_s * scale,
        hsdp_s * scale,
        cfg_s,
        profile.step_overhead_s,
    )


def attention_factor(plan: Plan, profile: Profile) -> float:
    """Attention rate of the plan's backend (and FP8) over attn_tflops, which is the platform default's."""
    backend = profile.attn_backend_default if plan.attn == "auto" else plan.attn
    factors = {"fa": profile.attn_fa_factor, "cudnn": profile.attn_cudnn_factor, "fi": profile.attn_fi_factor}
    default = factors[profile.attn_backend_default]
    return factors[backend] / default * (profile.fp8_attn_speedup if plan.fp8 else 1.0)


def vae_latent(workload: Workload) -> tuple[int, int, int]:
    """The VAE latent of a clip: latent frames, height and width (16x spatial; 720p x 189 frames: 48 x 45 x 80)."""
    return workload.latent_frames, math.ceil(workload.height / VAE_SPATIAL), math.ceil(workload.width / VAE_SPATIAL)


def vae_tile_shapes(latent_h: int, latent_w: int) -> list[tuple[int, int]]:
    """Latent height x width of each of vLLM-Omni's tiled-decode tiles, row by row (diffusers' Wan tiling:
    16-latent tiles every 12)."""
    rows = [min(VAE_TILE_LATENT, latent_h - i) for i in range(0, latent_h, VAE_TILE_STRIDE)]
    cols = [min(VAE_TILE_LATENT, latent_w - j) for j in range(0, latent_w, VAE_TILE_STRIDE)]
    return [(h, w) for h in rows for w in cols]


def vae_tiles(latent_h: int, latent_w: int) -> list[int]:
    """Latent areas of vLLM-Omni's tiled-decode tiles."""
    return list(_vae_tiles(latent_h, latent_w))


@lru_cache(maxsize=256)
def _vae_tiles(latent_h: int, latent_w: int) -> tuple[int, ...]:
    return tuple(h * w for h, w in vae_tile_shapes(latent_h, latent_w))


def busiest_rank(costs: list[float], ranks: int) -> float:
    """The largest load when tiles are handed out largest first to the least loaded rank (balanced by work).

    The least loaded rank is the lowest-numbered of the least loaded, as a scan of the ranks finds it: a heap of
    (load, rank) gives the same assignment and the same sums in O(log ranks) a tile (the search predicts this
    for every plan it weighs, thousands of times a decision)."""
    heap = [(0.0, rank) for rank in range(ranks)]
    for cost in sorted(costs, reverse=True):
        load, rank = heap[0]
        heapq.heapreplace(heap, (load + cost, rank))
    return max(load for load, _ in heap)


def vae_time_s(workload: Workload, plan: Plan, profile: Profile) -> float:
    """VAE decode: whole on one GPU, or with patch parallel vLLM-Omni's tiled decode over `plan.vae` ranks.

    Each tile costs vae_tile_fixed_share + vae_tile_area_cost x (its area / the frame's) of one whole
    decode (measured: small tiles run far below the whole decode's efficiency, so tiling costs more work
    than it spreads for small V), then the RGB tiles are gathered to rank 0."""
    frames_ratio = workload.num_frames / ANCHOR_FRAMES
    whole = profile.vae_decode_s * (workload.pixels_x_frames / ANCHOR_PIXELS_X_FRAMES)
    if plan.vae <= 1:
        return whole
    if profile.vae_tile_area_cost <= 0:  # a profile from before the tile model
        return whole / (1.0 + (plan.vae - 1) * profile.vae_parallel_efficiency)
    _, latent_h, latent_w = vae_latent(workload)
    rgb = workload.width * workload.height * workload.num_frames * RGB_BYTES
    return _tiled_vae_s(
        latent_h,
        latent_w,
        frames_ratio,
        rgb,
        plan.vae,
        profile.vae_decode_s,
        profile.vae_tile_fixed_share,
        profile.vae_tile_area_cost,
        profile.collective_latency_us,
        profile.bandwidth("allgather"),
    )


@lru_cache(maxsize=50_000)
def _tiled_vae_s(
    latent_h: int,
    latent_w: int,
    frames_ratio: float,
    rgb_bytes: int,
    ranks: int,
    decode_s: float,
    tile_fixed_share: float,
    tile_area_cost: float,
    latency_us: float,
    allgather_bytes_per_s: float,
) -> float:
    """The tiled decode over `ranks`, from numbers alone, so the cache's key is exactly what it depends on: a fit
    moves other terms far more often than these, and the search asks for the same decode again and again."""
    anchor_area = math.ceil(720 / VAE_SPATIAL) * math.ceil(1280 / VAE_SPATIAL)
    per_tile = decode_s * frames_ratio
    costs = [
        per_tile * (tile_fixed_share + tile_area_cost * area / anchor_area) for area in _vae_tiles(latent_h, latent_w)
    ]
    gather = _transfer_s(rgb_bytes * (ranks - 1) / ranks, latency_us, allgather_bytes_per_s)
    return busiest_rank(costs, ranks) + gather


def fixed_time_s(spec: ModelSpec, workload: Workload, plan: Plan, profile: Profile) -> float:
    """Text encode + VAE decode + muxing: independent of the generator's parallel scheme."""
    text = profile.text_encode_s * (workload.prompt_tokens / ANCHOR_PROMPT_TOKENS)
    text *= spec.reasoner_params_b / SUPER_REASONER_B
    mux = profile.mux_s * (workload.num_frames / ANCHOR_FRAMES)
    return text + vae_time_s(workload, plan, profile) + mux


def noisy_parts(prediction: Prediction, cv: float, rng: np.random.Generator) -> tuple[float, float]:
    """One request's (per-step, fixed) seconds as the twin serves them: each part with its own run-to-run noise of
    coefficient `cv` (the per-step part drawn first), never below zero. The twin engine, the search's forecast and
    the simulated rehearsals all draw a request's time here."""
    per_step = prediction.per_step_s * max(0.0, 1.0 + cv * float(rng.standard_normal()))
    fixed = prediction.fixed_s * max(0.0, 1.0 + cv * float(rng.standard_normal()))
    return per_step, fixed


def guardrail_time_s(workload: Workload, profile: Profile) -> float:
    if not workload.guardrails:
        return 0.0
    return profile.guardrail_base_s + profile.guardrail_per_word_s * workload.prompt_words


def load_time_s(spec: ModelSpec, profile: Profile, cold: bool = False, plan: Plan | None = None) -> float:
    """Seconds from process start to ready of one replica of `plan` (weights from page cache unless cold).

    Cold is the first load on a node (weights from disk); warm is a later load of the same model on the
    same node (weights in the page cache). Tensor parallel plans load faster than HSDP ones: see
    Profile.load_time_s.
    """
    return profile.load_time_s(spec.weights_gib_bf16, cold, plan.tp if plan is not None else 1)


@dataclass(frozen=True)
class Timing:
    """The time parts of a prediction alone: what a fit or a sensitivity needs, without memory and loads."""

    parts: StepParts
    per_step_s: float
    fixed_s: float
    guardrail_s: float
    latency_s: float  # client_s
    service_s: float
    server_s: float
    client_overhead_s: float


def timing(workload: Workload, plan: Plan, profile: Profile) -> Timing:
    """Per-step, fixed, guardrail, latency and service seconds of one replica (predict's, computed the same way)."""
    spec = get_model(workload.model)
    step = _step_parts(spec, workload, plan, profile)
    per_step = _step_total(step)
    fixed = fixed_time_s(spec, workload, plan, profile)
    guard = guardrail_time_s(workload, profile)
    server = fixed + workload.steps * per_step + guard
    overhead = client_overhead_s(workload, profile)
    latency = server + overhead
    service = max(latency - overlap_s(workload, profile), workload.steps * per_step)
    return Timing(step, per_step, fixed, guard, latency, service, server, overhead)


def client_overhead_s(workload: Workload, profile: Profile) -> float:
    """A client's time beyond the server's for one sync request: the profile's anchor figure scaled with the clip's
    pixels x frames (assumed: the MP4 encode dominates it, and the transfer grows with the clip too)."""
    return profile.client_overhead_s * (workload.pixels_x_frames / ANCHOR_PIXELS_X_FRAMES)


def overlap_s(workload: Workload, profile: Profile) -> float:
    """The part of a request that overlaps the next queued one: the profile's anchor figure (pipelined_s), scaled
    with the clip as the client's part is (the shipped profiles overlap exactly that part, whatever the clip)."""
    return profile.pipelined_s * (workload.pixels_x_frames / ANCHOR_PIXELS_X_FRAMES)


def predict(workload: Workload, plan: Plan, profile: Profile, node_gpus: int | None = None) -> Prediction:
    """Predict one replica of `plan` serving `workload` on the profile's GPU type.

    node_gpus: GPUs of the node the plan runs on; per-node throughput counts the replicas the plan
    puts there (its Nx prefix), which is what a node of that size pays for.
    """
    spec = get_model(workload.model)
    t = timing(workload, plan, profile)
    per_replica = 3600.0 / t.service_s
    notes: list[str] = []
    replicas = plan.replicas
    if node_gpus is not None and plan.gpus < node_gpus:
        notes.append(f"uses {plan.gpus} of {node_gpus} GPUs on the node")
    return Prediction(
        per_step_s=t.per_step_s,
        fixed_s=t.fixed_s,
        guardrail_s=t.guardrail_s,
        latency_s=t.latency_s,
        service_s=t.service_s,
        server_s=t.server_s,
        client_overhead_s=t.client_overhead_s,
        load_s=load_time_s(spec, profile, plan=plan),
        cold_load_s=load_time_s(spec, profile, cold=True, plan=plan),
        memory=memory_breakdown(spec, workload, plan, profile),
        step=_breakdown(t.parts),
        clips_per_hour_per_replica=per_replica,
        clips_per_hour_per_node=per_replica * replicas,
        notes=notes,
    )


def queued_latency_s(prediction: Prediction, concurrency: int) -> float:
    """Mean latency of a closed loop with `concurrency` clients on one replica (requests serialise)."""
    if concurrency <= 1:
        return prediction.latency_s
    return prediction.latency_s + (concurrency - 1) * prediction.service_s
