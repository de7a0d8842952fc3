"""The twin's engine: what one vLLM-Omni 0.30 replica of Cosmos 3 does with a request, timed by a Profile.

Timings are the performance model's (policies/perf_model.predict) for the request on the plan and profile,
with seeded noise of `profile.noise_cv` on the per-step and fixed parts: a simulation of the profile, not a
measurement. Memory is the same model's breakdown, and it is the truth the twin fails by: weights, HSDP
buffers and runtime that do not fit the GPU fail the load; activations that do not fit fail a request at
its first denoising step, and the VAE workspace at its decode, with CUDA's out-of-memory text.

Real behaviour each piece follows (vllm-omni 0.30.0 wheel, vllm 0.30.0 wheel):
- one request at a time in arrival order (Cosmos 3 has no step batching; asyncio.Lock wakes in FIFO order);
- two clocks: X-Inference-Time-S is the server's generation time; the answer reaches the client the profile's
  client_overhead_s later (the API server encodes the MP4 and sends it outside the engine,
  vllm_omni/entrypoints/openai/serving_video.py), while the engine already runs the next queued request;
- frames rounded up to 4k + 1 and each side down to a multiple of 16 (diffusion/models/cosmos3/pipeline_cosmos3.py);
- a distilled checkpoint refuses text-to-video and forces guidance 1.0 (pipeline_cosmos3.py,
  `_validate_distilled_generation_mode`, `_resolve_guidance_scale`);
- stage durations only under `--enable-diffusion-pipeline-profiler` (diffusion/worker/utils.py,
  `consume_pipeline_stage_durations`); the profiler times pipeline methods, so there is no guardrail stage;
- a per-request failure (an OOM at run time) fails that request only; the engine stays up
  (diffusion/executor/multiproc_executor.py wraps it as `DiffusionOutput(error=str(exc))`);
- a dead engine fails every request with EngineDeadError (vllm/v1/engine/exceptions.py).
"""

from __future__ import annotations

import asyncio
import os
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from worldtune.policies import perf_model
from worldtune.tools.plans.estimate import resolve_profile
from worldtune.tools.twin.clock import EngineClock
from worldtune.tools.twin.video import make_mp4, served_frames, served_size
from worldtune.tools.words.bench_spec import SYNC_TIMEOUT_S
from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.gpus import get_gpu
from worldtune.tools.words.models import get_model
from worldtune.tools.words.plan import Plan, PlanField
from worldtune.tools.words.profile import Profile
from worldtune.tools.words.workload import Workload

DEFAULT_SYNC_TIMEOUT_S = SYNC_TIMEOUT_S  # vLLM-Omni's default (tools/words/bench_spec.py)
# A stand-in for the Cosmos guardrail's text blocklist: enough to exercise the 400 path.
BLOCKLIST: tuple[str, ...] = ("bomb", "gore", "massacre", "nsfw", "beheading", "terrorist")
PIPELINE = "Cosmos3OmniDiffusersPipeline"  # the profiler names stages after the pipeline class
ENGINE_DEAD_MESSAGE = "EngineCore encountered an issue. See stack trace (above) for the root cause."
WATCHDOG_S = 5.0  # vllm/entrypoints/launchers/launcher.py: watchdog_loop checks a dead engine this often


def _env_flag(name: str) -> bool:
    raw = os.environ.get(name, "0").strip()
    try:
        return bool(int(raw))
    except ValueError as exc:
        raise InvalidInput(name, raw, "0 or 1") from exc


class TwinConfig(BaseModel):
    """How one twin server behaves: what it models, how fast it runs, what it reports."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    model: str = "cosmos3-super"
    gpu: str = "H200"
    plan: PlanField = Field(default_factory=lambda: Plan(cfg=2, ulysses=4, hsdp=8))
    profile_path: str | None = Field(default=None, description="profile YAML; the shipped one for the GPU if unset")
    time_scale: float = Field(default=1.0, gt=0, description="every sleep is divided by this")
    seed: int = 0
    guardrails: bool = True
    load_time_s: float | None = Field(default=None, ge=0, description="model seconds; from the profile if unset")
    cold_load: bool = Field(
        default=False, description="the first load on its node (weights from disk); else warm (page cache)"
    )
    sync_timeout_s: float = Field(default=DEFAULT_SYNC_TIMEOUT_S, gt=0, description="model seconds")
    stage_profiler: bool = Field(default=False, description="--enable-diffusion-pipeline-profiler")
    keep_alive_on_engine_death: bool = Field(default=False, description="VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1")
    api_key: str | None = Field(default=None, description="as vLLM's --api-key: /v1 routes need this bearer token")
    preempt_after_s: float | None = Field(
        default=None,
        gt=0,
        description="model seconds after its load at which its spot node is taken back "
        "(rehearsed preemption: the process exits at once, every connection dropped); None: never",
    )

    @classmethod
    def from_env(cls, **fields: Any) -> TwinConfig:
        """A config with the settings vLLM-Omni reads from its environment."""
        raw = os.environ.get("VLLM_OMNI_VIDEO_SYNC_TIMEOUT")
        if raw is not None and "sync_timeout_s" not in fields:
            try:
                fields["sync_timeout_s"] = float(raw)
            except ValueError as exc:
                raise InvalidInput("VLLM_OMNI_VIDEO_SYNC_TIMEOUT", raw, "a number of seconds") from exc
        if "keep_alive_on_engine_death" not in fields:
            fields["keep_alive_on_engine_death"] = _env_flag("VLLM_KEEP_ALIVE_ON_ENGINE_DEATH")
        return cls(**fields)


class GuardrailViolation(Exception):
    """The text guardrail blocked the prompt (an OmniClientError: HTTP 400)."""


class PipelineFailure(Exception):
    """The request failed inside the engine (an OOM, an unsupported mode): HTTP 500; the engine stays up."""


class EngineDead(Exception):
    """The engine is gone (EngineDeadError): every request fails and the server shuts down."""


class LoadOutOfMemory(Exception):
    """The plan's static memory does not fit the GPU: the server never starts."""


@dataclass(frozen=True)
class TwinRequest:
    """One request as the engine sees it once the HTTP layer has resolved defaults."""

    prompt: str
    width: int
    height: int
    num_frames: int  # as asked; the pipeline rounds it
    fps: float
    steps: int
    guidance_scale: float
    flow_shift: float
    seed: int
    negative_prompt: str
    max_sequence_length: int
    guardrails: bool
    image: tuple[int, int] | None = None  # the conditioning image's size: image-to-video


@dataclass
class Generated:
    """One finished request: the clip and the metadata vLLM-Omni reports, in model seconds."""

    video: bytes
    inference_time_s: float
    stage_durations: dict[str, float]
    peak_memory_mb: float
    num_frames: int
    fps: float
    done_at_model_s: float | None = None  # on the engine's model clock (tools/twin/clock.py): twin-only
    client_time_s: float | None = None  # queue + server + the client's part, model s: twin-only


def cuda_oom_message(needed_gib: float, capacity_gib: float, used_gib: float) -> str:
    """torch.OutOfMemoryError's text (the shape PyTorch prints), for what the memory model says does not fit."""
    free = max(0.0, capacity_gib - used_gib)
    return (
        f"CUDA out of memory. Tried to allocate {needed_gib:.2f} GiB. GPU 0 has a total capacity of "
        f"{capacity_gib:.2f} GiB of which {free:.2f} GiB is free. Of the allocated memory {used_gib:.2f} GiB "
        "is allocated by PyTorch."
    )


@dataclass
class _Timing:
    guard: float
    text: float
    encode: float  # I2V: the conditioning frame's VAE encode (assumed: the decoder's cost per pixel-frame)
    diffuse: float
    vae: float
    mux: float
    client: float  # after the engine: the API server's MP4 encode, the request and the transfer (the second clock)
    prediction: perf_model.Prediction

    @property
    def server(self) -> float:
        """The server's generation time (its X-Inference-Time-S, less the queue)."""
        return self.guard + self.text + self.encode + self.diffuse + self.vae + self.mux

    @property
    def total(self) -> float:
        """A client's end-to-end time of the request, less the queue."""
        return self.server + self.client


class TwinEngine:
    """One replica: a FIFO of requests served one at a time with the performance model's timings."""

    def __init__(self, config: TwinConfig, profile: Profile | None = None) -> None:
        self.config = config
        self.spec = get_model(config.model)
        self.plan = config.plan.single_replica()
        self.prof = profile or resolve_profile(config.gpu, config.profile_path)
        self.profile = self.prof
        self.gpu = get_gpu(config.gpu)
        self.rng = np.random.default_rng(config.seed)
        self.lock = asyncio.Lock()  # FIFO: asyncio.Lock wakes waiters in arrival order
        self.died = asyncio.Event()
        self.load_s = config.load_time_s if config.load_time_s is not None else self._profile_load_s()
        self.clock = EngineClock(config.time_scale)  # when each answer is done, in model seconds (X-Twin-Done-At)

    def _profile_load_s(self) -> float:
        load = perf_model.load_time_s(self.spec, self.prof, cold=self.config.cold_load, plan=self.plan)
        return load + (self.prof.guardrail_startup_s if self.config.guardrails else 0.0)

    @property
    def scale(self) -> float:
        return self.config.time_scale

    @property
    def dead(self) -> bool:
        return self.died.is_set()

    def kill(self) -> None:
        """The engine core dies (the twin's SIGUSR1): /health turns 503, every request fails."""
        self.died.set()

    async def sleep(self, model_s: float) -> None:
        """Sleep model seconds (scaled); a dying engine cuts it short with EngineDead."""
        if self.dead:
            raise EngineDead(ENGINE_DEAD_MESSAGE)
        if model_s <= 0:
            return
        try:
            await asyncio.wait_for(self.died.wait(), timeout=model_s / self.scale)
        except TimeoutError:
            return
        raise EngineDead(ENGINE_DEAD_MESSAGE)

    # ---- memory: the profile's terms are the truth ----------------------------------------------
    def static_memory_gib(self) -> float:
        """What loading holds on each GPU: weight shards, HSDP buffers, runtime (no request yet)."""
        m = perf_model.memory_breakdown(self.spec, self.workload_for(None), self.plan, self.prof)
        return m.weights_gib + m.hsdp_buffers_gib + m.runtime_gib

    async def load(self) -> None:
        """Simulate the load; LoadOutOfMemory where the weights do not fit (after the share that did load)."""
        static = self.static_memory_gib()
        capacity = self.gpu.memory_gib
        if static > capacity:
            # assumed: weights stream in at a steady rate, so the OOM comes after the share that fit
            await self.sleep(self.load_s * capacity / static)
            raise LoadOutOfMemory(cuda_oom_message(static - capacity, capacity, capacity))
        await self.sleep(self.load_s)

    def workload_for(self, request: TwinRequest | None) -> Workload:
        """The performance model's view of a request (any size vLLM-Omni accepts, so no Workload validation)."""
        if request is None:
            from worldtune.tools.words.workload import anchor_workload

            return anchor_workload(self.spec.key)
        width, height = served_size(request.width, request.height)
        fields: dict[str, Any] = {
            "model": self.spec.key,
            "task": "i2v" if request.image else "t2v",
            "width": max(width, 1),
            "height": max(height, 1),
            "num_frames": served_frames(request.num_frames),
            "fps": request.fps,
            "steps": request.steps,
            "guidance_scale": 1.0 if self.spec.distilled else request.guidance_scale,
            "flow_shift": request.flow_shift,
            "seed": request.seed,
            "prompt": request.prompt,
            "negative_prompt": request.negative_prompt,
            "guardrails": self.config.guardrails and request.guardrails,
            "max_sequence_length": request.max_sequence_length,
        }
        return Workload.model_construct(**fields)

    def _timing(self, workload: Workload) -> _Timing:
        prediction = perf_model.predict(workload, self.plan, self.prof)
        per_step, fixed = perf_model.noisy_parts(prediction, self.prof.noise_cv, self.rng)
        parts = (self.prof.text_encode_s, self.prof.vae_decode_s, self.prof.mux_s)
        total = sum(parts) or 1.0
        text, vae, mux = (fixed * p / total for p in parts)
        encode = 0.0
        if workload.task == "i2v":
            encode = self.prof.vae_decode_s * workload.width * workload.height / perf_model.ANCHOR_PIXELS_X_FRAMES
        diffuse = workload.steps * per_step
        client = prediction.client_overhead_s
        return _Timing(prediction.guardrail_s, text, encode, diffuse, vae, mux, client, prediction)

    # ---- one request ------------------------------------------------------------------------------
    async def generate(self, request: TwinRequest, on_started: Any = None, timeout_s: float | None = None) -> Generated:
        """Queue, run and answer one request; raises GuardrailViolation, PipelineFailure, EngineDead or TimeoutError.

        `timeout_s` (model seconds) bounds queue and run, not the wait for the twin's own MP4 encoding, which
        is wall time that a time scale does not shrink (a real server's encode is inside its modelled time).
        Once the request holds the engine it is judged on the model clock (queue wait + stage times), so a
        loaded test machine cannot turn a clip that fits the timeout into a 504; the wall clock (twice the
        scaled timeout) only bounds a long queue.
        """
        if self.dead:
            raise EngineDead(ENGINE_DEAD_MESSAGE)
        workload = self.workload_for(request)
        width, height = served_size(request.width, request.height)
        if min(width, height) < 16:
            # assumed: a side under 16 pixels leaves no latent grid; the real pipeline fails somewhere in it
            raise PipelineFailure(f"Cosmos3 canvas dimensions must be positive, got {width}x{height}.")
        encoded = asyncio.ensure_future(
            asyncio.to_thread(make_mp4, workload.width, workload.height, workload.num_frames, workload.fps)
        )
        try:
            running = self._run(request, workload, on_started, timeout_s)
            wall_timeout = None if timeout_s is None else 2.0 * timeout_s / self.scale + 1.0
            timing, queued_s, done_at = await asyncio.wait_for(running, timeout=wall_timeout)
            try:
                video = await encoded
            except InvalidInput as exc:  # a clip the twin's encoder cannot write (a side above its limit)
                raise PipelineFailure(f"Video encoding failed: {exc}") from None
        finally:
            if not encoded.done():
                encoded.cancel()
        return Generated(
            video=video,
            inference_time_s=queued_s + timing.server,
            stage_durations=self._stages(timing, queued_s),
            peak_memory_mb=timing.prediction.memory_gib_per_gpu * 1024.0,
            num_frames=workload.num_frames,
            fps=float(workload.fps),
            done_at_model_s=done_at,
            client_time_s=queued_s + timing.total,
        )

    async def _run(
        self, request: TwinRequest, workload: Workload, on_started: Any, budget_s: float | None = None
    ) -> tuple[_Timing, float, float]:
        """Run one request: its timing, queue wait (model s) and engine clock when done. Past `budget_s` model
        seconds (queue included) it raises TimeoutError at that point of the model clock."""
        timing = self._timing(workload)
        # the tail that overlaps the next queued request (the client's part, then decode/mux), never the denoising
        tail = min(perf_model.overlap_s(workload, self.prof), timing.vae + timing.mux + timing.client)
        queued = self.clock.arrive()
        arrived = self.clock.arrival() if queued else None
        try:
            async with self.lock:
                start, held = self.clock.start(queued), [0.0]
                waited = 0.0 if arrived is None else max(0.0, start - arrived)
                try:
                    queued_s = await self._hold(request, workload, timing, tail, waited, on_started, budget_s, held)
                finally:  # before the next request takes the engine (no await in between)
                    self.clock.release(start + held[0])
        finally:
            self.clock.leave()
        done_at = start + held[0] + tail
        self.clock.tail(done=False)
        try:
            await self.sleep(tail)
        finally:
            self.clock.tail(done=True, at=done_at)
        return timing, queued_s, done_at

    async def _hold(
        self,
        request: TwinRequest,
        workload: Workload,
        timing: _Timing,
        tail: float,
        queued_s: float,
        on_started: Any,
        budget_s: float | None,
        held: list[float],
    ) -> float:
        """The part of a request that holds the engine: its queue wait (model s); `held` sums its stage times.

        `queued_s` is its wait on the model clock (EngineClock.arrival to its start), 0 for one that found the
        engine free: a wait in wall time would add K times a loaded machine's scheduler jitter at time scale K.
        """
        memory = timing.prediction.memory
        static = memory.weights_gib + memory.hsdp_buffers_gib + memory.runtime_gib
        capacity = self.gpu.memory_gib
        used = queued_s

        async def sleep(model_s: float) -> None:
            nonlocal used
            if budget_s is not None and used + model_s > budget_s:
                held[0] += max(0.0, budget_s - used)
                await self.sleep(max(0.0, budget_s - used))
                raise TimeoutError
            used += model_s
            held[0] += model_s
            await self.sleep(model_s)

        await sleep(0.0)  # a queue wait past the budget times out at once
        if on_started is not None:
            await on_started()
        if self.spec.distilled and request.image is None:
            raise PipelineFailure(
                "Cosmos3 distilled checkpoints support only text-to-image and image-to-video generation; "
                "text-to-video requests are unsupported."
            )
        if workload.guardrails:
            await sleep(timing.guard)
            if _blocked(request.prompt):
                raise GuardrailViolation("Input was blocked by Cosmos3 guardrails.")
        await sleep(timing.text + timing.encode)
        if static + memory.activations_gib > capacity:
            raise PipelineFailure(cuda_oom_message(memory.activations_gib, capacity, static))
        await sleep(timing.diffuse)
        if static + memory.activations_gib + memory.vae_gib > capacity:
            raise PipelineFailure(cuda_oom_message(memory.vae_gib, capacity, static + memory.activations_gib))
        await sleep(timing.vae + timing.mux + timing.client - tail)
        return queued_s

    def _stages(self, timing: _Timing, queued_s: float) -> dict[str, float]:
        """What vLLM-Omni 0.30 reports for Cosmos3's pipeline with the profiler on ({} with it off, as it sends), by
        the names the real server sends (tests/integration/test_real_engine_twin_diff.py holds the twin to them): the
        pipeline's stages in seconds, with no text-encoder stage (Cosmos3's text runs inside its transformer, so
        inside `diffuse`) and no `<Pipeline>.forward` (only the server's log shows it); then the engine's own clocks
        in milliseconds: `queue_wait_ms`, the orchestrator's hand-over to the stage (the twin has none: 0), and
        `stage_0_gen_ms`, the diffusion stage from submit to output (its scheduler queue, the guardrail and the
        pipeline)."""
        if not self.config.stage_profiler:
            return {}
        stages = {f"{PIPELINE}.diffuse": timing.text + timing.diffuse, f"{PIPELINE}.vae.decode": timing.vae}
        if timing.encode:  # ASSUMED name: image-to-video was not run on the real server (REAL_ENGINE.md)
            stages[f"{PIPELINE}.vae.encode"] = timing.encode
        work = timing.guard + timing.text + timing.encode + timing.diffuse + timing.vae
        stages = {k: round(v, 6) for k, v in stages.items()}
        stages["queue_wait_ms"] = 0.0
        stages["stage_0_gen_ms"] = round((queued_s + work) * 1000.0, 3)
        return stages


def _blocked(prompt: str) -> bool:
    words = set(re.findall(r"[a-z]+", prompt.lower()))
    return any(word in words for word in BLOCKLIST)
