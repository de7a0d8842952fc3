"""The twin engine: an HTTP server that speaks vLLM-Omni 0.30's video API and behaves like Cosmos 3 on a plan.

Routes (REFERENCE.md section 3): GET /health, GET /v1/models, POST /v1/videos (async job), GET /v1/videos
(list), GET/DELETE /v1/videos/{id}, GET /v1/videos/{id}/content, POST /v1/videos/sync (MP4 body with
X-Request-Id, X-Model, X-Inference-Time-S, X-Stage-Durations, X-Peak-Memory-MB).

Behaviour, as vLLM-Omni's: 503 on /health and on work while the model "loads" (load time from the
profile); one request at a time in FIFO order (a replica is one GPU world); the sync timeout counts
queue time and answers 504; malformed or out-of-range form fields answer 400 with a message (the
Workload word validates them); `max_sequence_length` is read only from `extra_params`; guardrails are on
unless the server (`guardrails=False`) or the request (`extra_params.guardrails=false`) turns them off,
and a prompt with a blocklisted word answers 400 after the guard's time.

Timings are the performance model's (policies/perf_model.predict) for the request's workload on the
plan and profile, with seeded noise of `profile.noise_cv` on the per-step and fixed parts. Part of one
request (`profile.pipelined_s`) overlaps the next queued one, as measured on vLLM-Omni, so a queue
serves at 1 / service time. `time_scale` K divides every sleep by K; reported times stay in model
seconds. The sync timeout (VLLM_OMNI_VIDEO_SYNC_TIMEOUT, default 600) is read as model seconds and
scaled too, so a rehearsal at K=100 times out where the real server would. Every response carries
`X-Twin-Time-Scale` so a client can convert its wall clock back to model seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import re
import signal
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from worldtune.policies import perf_model
from worldtune.tools.errors import InvalidInput
from worldtune.tools.estimate import resolve_profile
from worldtune.tools.models import get_model
from worldtune.tools.plan import Plan
from worldtune.tools.profile import Profile
from worldtune.tools.video import make_mp4
from worldtune.tools.workload import Workload, anchor_workload

DEFAULT_SYNC_TIMEOUT_S = 600.0
# A stand-in for the Cosmos guardrail's text blocklist: enough to exercise the 400 path.
BLOCKLIST: tuple[str, ...] = ("bomb", "gore", "massacre", "nsfw", "beheading", "terrorist")
PIPELINE = "Cosmos3OmniDiffusersPipeline"  # stage names as vLLM-Omni's pipeline profiler reports them
TIME_SCALE_HEADER = "X-Twin-Time-Scale"


class TwinConfig(BaseModel):
    """How one twin server behaves: what it models, how fast it runs, what it refuses."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    model: str = "cosmos3-super"
    gpu: str = "H200"
    plan: str = "cfg2-u4-hsdp8"
    profile_path: str | None = Field(default=None, description="profile YAML; the shipped one for the GPU if unset")
    time_scale: float = Field(default=1.0, gt=0, description="every sleep is divided by this")
    seed: int = 0
    guardrails: bool = True
    load_time_s: float | None = Field(default=None, ge=0, description="model seconds; from the profile if unset")
    sync_timeout_s: float = Field(default=DEFAULT_SYNC_TIMEOUT_S, gt=0, description="model seconds")

    @classmethod
    def from_env(cls, **fields: Any) -> TwinConfig:
        """A config with the sync timeout from VLLM_OMNI_VIDEO_SYNC_TIMEOUT, as vLLM-Omni reads it."""
        raw = os.environ.get("VLLM_OMNI_VIDEO_SYNC_TIMEOUT")
        if raw is not None and "sync_timeout_s" not in fields:
            try:
                fields["sync_timeout_s"] = float(raw)
            except ValueError as exc:
                raise InvalidInput("VLLM_OMNI_VIDEO_SYNC_TIMEOUT", raw, "a number of seconds") from exc
        return cls(**fields)


class GuardrailViolation(Exception):
    """The text guardrail blocked the prompt (vLLM-Omni answers 400)."""


class TwinError(Exception):
    """An HTTP error with vLLM-Omni's status code and message."""

    def __init__(self, status: int, message: str, kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind


@dataclass
class Generated:
    """One finished request: the clip and the metadata vLLM-Omni reports, in model seconds."""

    video: bytes
    inference_time_s: float
    stage_durations: dict[str, float]
    peak_memory_mb: float


@dataclass
class Job:
    """An async job as GET /v1/videos/{id} shows it, plus its task and output."""

    record: dict[str, Any]
    task: asyncio.Task[None] | None = None
    video: bytes | None = None
    created: float = field(default_factory=time.time)


class TwinEngine:
    """One replica: a FIFO of requests served one at a time with the performance model's timings."""

    def __init__(self, config: TwinConfig, profile: Profile | None = None) -> None:
        self.config = config
        self.spec = get_model(config.model)
        self.plan = Plan.parse(config.plan).single_replica()
        self.profile = profile or resolve_profile(config.gpu, config.profile_path)
        self.rng = np.random.default_rng(config.seed)
        self.lock = asyncio.Lock()  # FIFO: asyncio.Lock wakes waiters in arrival order
        self.jobs: dict[str, Job] = {}
        self.started = time.monotonic()
        self.load_s = config.load_time_s if config.load_time_s is not None else self._profile_load_s()

    def _profile_load_s(self) -> float:
        load = perf_model.load_time_s(self.spec, self.profile)
        return load + (self.profile.guardrail_startup_s if self.config.guardrails else 0.0)

    # ---- time ------------------------------------------------------------------------------
    @property
    def scale(self) -> float:
        return self.config.time_scale

    async def sleep(self, model_s: float) -> None:
        if model_s > 0:
            await asyncio.sleep(model_s / self.scale)

    @property
    def ready(self) -> bool:
        return (time.monotonic() - self.started) * self.scale >= self.load_s

    # ---- one request ----------------------------------------------------------------------
    def guardrails_on(self, workload: Workload) -> bool:
        return self.config.guardrails and workload.guardrails

    async def generate(self, workload: Workload, on_started: Callable[[], Awaitable[None]] | None = None) -> Generated:
        """Queue, run and answer one request (raises GuardrailViolation for a blocked prompt)."""
        arrived = time.monotonic()
        encoded = asyncio.ensure_future(
            asyncio.to_thread(make_mp4, workload.width, workload.height, workload.num_frames, workload.fps)
        )
        try:
            return await self._generate(workload, arrived, encoded, on_started)
        finally:
            if not encoded.done():
                encoded.cancel()

    async def _generate(
        self,
        workload: Workload,
        arrived: float,
        encoded: asyncio.Future[bytes],
        on_started: Callable[[], Awaitable[None]] | None,
    ) -> Generated:
        guard = self.guardrails_on(workload)
        prediction = perf_model.predict(workload.with_changes(guardrails=guard), self.plan, self.profile)
        cv = self.profile.noise_cv
        per_step = prediction.per_step_s * max(0.0, 1.0 + cv * float(self.rng.standard_normal()))
        fixed = prediction.fixed_s * max(0.0, 1.0 + cv * float(self.rng.standard_normal()))
        guard_s = prediction.guardrail_s
        diffuse = workload.steps * per_step
        latency = guard_s + fixed + diffuse
        # the tail that overlaps the next queued request (decode/mux), never the denoising itself
        tail = min(self.profile.pipelined_s, max(0.0, latency - diffuse - guard_s))
        async with self.lock:
            started = time.monotonic()
            if on_started is not None:
                await on_started()
            if guard and _blocked(workload.prompt):
                await self.sleep(guard_s)
                raise GuardrailViolation("Input was blocked by Cosmos3 guardrails.")
            await self.sleep(latency - tail)
        await self.sleep(tail)
        video = await encoded
        queue_s = (started - arrived) * self.scale
        text, vae, _mux = _split_fixed(fixed, self.profile)
        stages = {
            f"{PIPELINE}.text_encoder.forward": text,
            f"{PIPELINE}.diffuse": diffuse,
            f"{PIPELINE}.vae.decode": vae,
            f"{PIPELINE}.forward": guard_s + text + diffuse + vae,
        }
        if guard:
            stages["guardrails"] = guard_s
        return Generated(
            video=video,
            inference_time_s=queue_s + latency,
            stage_durations={k: round(v, 6) for k, v in stages.items()},
            peak_memory_mb=prediction.memory_gib_per_gpu * 1024.0,
        )


def _blocked(prompt: str) -> bool:
    words = set(re.findall(r"[a-z]+", prompt.lower()))
    return any(word in words for word in BLOCKLIST)


def _split_fixed(fixed: float, profile: Profile) -> tuple[float, float, float]:
    """Share the fixed time among text encode, VAE decode and muxing in the profile's proportions."""
    parts = (profile.text_encode_s, profile.vae_decode_s, profile.mux_s)
    total = sum(parts) or 1.0
    text, vae, mux = (fixed * p / total for p in parts)
    return text, vae, mux


# ---- the wire form --------------------------------------------------------------------------------
def _error(status: int, message: str, kind: str = "BadRequestError") -> JSONResponse:
    """vLLM's OpenAI-style error body."""
    return JSONResponse({"error": {"message": message, "type": kind, "param": None, "code": status}}, status)


def _int(form: dict[str, str], name: str) -> int | None:
    raw = form.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise TwinError(400, f"{name}={raw!r} is not valid: expected an integer") from None


def _float(form: dict[str, str], name: str) -> float | None:
    raw = form.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        raise TwinError(400, f"{name}={raw!r} is not valid: expected a number") from None
    if not math.isfinite(value):
        raise TwinError(400, f"{name}={raw!r} is not valid: expected a finite number")
    return value


def _bool(form: dict[str, str], name: str) -> bool | None:
    raw = form.get(name)
    if raw is None or raw == "":
        return None
    if raw.lower() in ("true", "1", "yes", "on"):
        return True
    if raw.lower() in ("false", "0", "no", "off"):
        return False
    raise TwinError(400, f"{name}={raw!r} is not valid: expected true or false")


def parse_form(form: dict[str, str], engine: TwinEngine) -> tuple[Workload, dict[str, Any]]:
    """The request's Workload (validated) and the echo fields of a job record; TwinError(400) if bad."""
    prompt = form.get("prompt")
    if not prompt:
        raise TwinError(400, "prompt is required (multipart form field 'prompt')")
    model = form.get("model")
    if model and model != engine.spec.hf_id:
        raise TwinError(
            400, f"Model mismatch: request specifies '{model}' but server is running '{engine.spec.hf_id}'."
        )
    extra_raw = form.get("extra_params")
    extra: dict[str, Any] = {}
    if extra_raw:
        try:
            extra = json.loads(extra_raw)
        except json.JSONDecodeError:
            raise TwinError(400, "Invalid JSON in form field.") from None
        if not isinstance(extra, dict):
            raise TwinError(400, f"Invalid JSON in form field: expected dict, got {type(extra).__name__}.")
    base = anchor_workload(engine.spec.key)
    fields: dict[str, Any] = {"prompt": prompt}
    size = form.get("size")
    if size:
        match = re.fullmatch(r"(\d+)x(\d+)", size)
        if not match:
            raise TwinError(400, f"size={size!r} is not valid: expected WIDTHxHEIGHT, e.g. 1280x720")
        fields["width"], fields["height"] = int(match.group(1)), int(match.group(2))
    for name in ("width", "height"):
        value = _int(form, name)
        if value is not None and not size:
            fields[name] = value
    fps = _float(form, "fps")
    if fps is not None:
        if fps != int(fps):
            raise TwinError(400, f"fps={fps:g} is not valid: expected one of 10, 16, 24, 30")
        fields["fps"] = int(fps)
    frames = _int(form, "num_frames")
    seconds = form.get("seconds")
    if frames is None and seconds:
        if not re.fullmatch(r"[1-9]\d*", seconds):
            raise TwinError(400, f"seconds={seconds!r} is not valid: expected a positive integer")
        frames = int(seconds) * int(fields.get("fps", base.fps))
    if frames is not None:
        fields["num_frames"] = frames
    for form_name, field_name in (("num_inference_steps", "steps"), ("seed", "seed")):
        value = _int(form, form_name)
        if value is not None:
            fields[field_name] = value
    for name in ("guidance_scale", "flow_shift"):
        number = _float(form, name)
        if number is not None:
            fields[name] = number
    if form.get("negative_prompt") is not None:
        fields["negative_prompt"] = form["negative_prompt"]
    # vLLM-Omni reads max_sequence_length only from extra_params; a top-level field is ignored
    if "max_sequence_length" in extra:
        fields["max_sequence_length"] = extra["max_sequence_length"]
    guard = extra.get("guardrails")
    fields["guardrails"] = True if guard is None else bool(guard)
    try:
        workload = base.with_changes(**fields)
    except InvalidInput as exc:
        raise TwinError(400, str(exc)) from None
    except ValidationError as exc:
        raise TwinError(400, _validation_message(exc, form)) from None
    echo = {
        "prompt": prompt,
        "size": size,
        "seconds": seconds or "4",
        "quality": form.get("quality") or "default",
        "return_stage_metrics": _bool(form, "return_stage_metrics"),
    }
    return workload, echo


_FORM_NAME = {"steps": "num_inference_steps"}


def _validation_message(exc: ValidationError, form: dict[str, str]) -> str:
    parts = []
    for err in exc.errors():
        cause = (err.get("ctx") or {}).get("error")
        if isinstance(cause, InvalidInput):  # raised inside the Workload's own validators
            parts.append(str(cause))
            continue
        loc = ".".join(str(x) for x in err.get("loc", ())) or "request"
        name = _FORM_NAME.get(loc, loc)
        value = form.get(name, err.get("input"))
        parts.append(f"{name}={value!r} is not valid: {err.get('msg', 'invalid')}")
    return "; ".join(parts)


# ---- the HTTP app ---------------------------------------------------------------------------------
class _TimeScaleHeader:
    """ASGI middleware: every response says the twin's time scale (clients convert wall to model time)."""

    def __init__(self, app: ASGIApp, scale: float) -> None:
        self.app = app
        self.value = f"{scale:g}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_header(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (TIME_SCALE_HEADER.lower().encode(), self.value)]
            await send(message)

        await self.app(scope, receive, send_with_header if scope["type"] == "http" else send)


def create_app(config: TwinConfig, profile: Profile | None = None) -> tuple[ASGIApp, TwinEngine]:
    """The ASGI app of one replica and its engine."""
    engine = TwinEngine(config, profile)
    model_name = engine.spec.hf_id

    def loading() -> JSONResponse:
        return _error(503, "The model is still loading; retry when /health answers 200.", "ServiceUnavailable")

    async def read_form(request: Request) -> dict[str, str]:
        try:
            form = await request.form()
        except Exception as exc:  # malformed multipart body
            raise TwinError(400, f"Malformed multipart form: {exc}") from None
        return {k: v for k, v in form.items() if isinstance(v, str)}

    async def health(request: Request) -> Response:
        if not engine.ready:
            return JSONResponse({"status": "unhealthy", "reason": "loading"}, 503)
        return JSONResponse({"status": "healthy"})

    async def models(request: Request) -> Response:
        if not engine.ready:
            return loading()
        entry = {"id": model_name, "object": "model", "created": int(engine.started), "owned_by": "vllm-omni",
                 "root": model_name, "parent": None}  # fmt: skip
        return JSONResponse({"object": "list", "data": [entry]})

    async def admitted(request: Request) -> tuple[Workload, dict[str, Any]] | Response:
        """The request's workload and what to echo back, or the answer refusing it (loading, bad form)."""
        try:
            form = await read_form(request)
            if not engine.ready:
                return loading()
            return parse_form(form, engine)
        except TwinError as exc:
            return _error(exc.status, exc.message, exc.kind)

    async def sync(request: Request) -> Response:
        got = await admitted(request)
        if isinstance(got, Response):
            return got
        workload, _ = got
        request_id = f"video_sync-{uuid.uuid4().hex}"
        timeout = config.sync_timeout_s
        try:
            done = await asyncio.wait_for(engine.generate(workload), timeout=timeout / engine.scale)
        except TimeoutError:
            return _error(504, f"Video generation timed out after {timeout}s.", "GatewayTimeout")
        except GuardrailViolation as exc:
            return _error(400, str(exc))
        headers = {
            "X-Request-Id": request_id,
            "X-Model": model_name,
            "X-Inference-Time-S": f"{done.inference_time_s:.3f}",
            "X-Stage-Durations": json.dumps(done.stage_durations, separators=(",", ":")),
            "X-Peak-Memory-MB": f"{done.peak_memory_mb:.3f}",
        }
        return Response(done.video, media_type="video/mp4", headers=headers)

    async def create(request: Request) -> Response:
        got = await admitted(request)
        if isinstance(got, Response):
            return got
        workload, echo = got
        video_id = f"video_gen_{uuid.uuid4().hex}"
        record: dict[str, Any] = {
            "model": model_name, "prompt": echo["prompt"], "id": video_id, "object": "video", "status": "queued",
            "size": echo["size"], "progress": 0, "seconds": echo["seconds"], "quality": echo["quality"],
            "completed_at": None, "created_at": int(time.time()), "remixed_from_video_id": None, "error": None,
            "media_type": "video/mp4", "expires_at": None, "file_name": None, "inference_time_s": None,
            "fps": float(workload.fps), "num_frames": workload.num_frames, "duration_s": workload.video_seconds,
            "metrics": None, "stage_durations": {}, "peak_memory_mb": 0.0, "action": None,
        }  # fmt: skip
        job = Job(record=record)
        engine.jobs[video_id] = job
        job.task = asyncio.create_task(_run_job(engine, job, workload, bool(echo["return_stage_metrics"])))
        return JSONResponse(dict(record))

    async def list_jobs(request: Request) -> Response:
        order = request.query_params.get("order", "desc")
        if order not in ("asc", "desc"):
            return _error(400, f"order={order!r} is not valid: expected asc or desc")
        jobs = sorted(engine.jobs.values(), key=lambda j: j.created, reverse=order == "desc")
        after = request.query_params.get("after")
        if after is not None:
            ids = [j.record["id"] for j in jobs]
            jobs = jobs[ids.index(after) + 1 :] if after in ids else []
        has_more = False
        limit_raw = request.query_params.get("limit")
        if limit_raw is not None:
            if not limit_raw.isdigit() or int(limit_raw) > 100:
                return _error(400, f"limit={limit_raw!r} is not valid: expected an integer 0-100")
            has_more = len(jobs) > int(limit_raw)
            jobs = jobs[: int(limit_raw)]
        data = [dict(j.record) for j in jobs]
        return JSONResponse({"object": "list", "data": data, "has_more": has_more,
                             "first_id": data[0]["id"] if data else None,
                             "last_id": data[-1]["id"] if data else None})  # fmt: skip

    async def retrieve(request: Request) -> Response:
        job = engine.jobs.get(request.path_params["video_id"])
        if job is None:
            return _error(404, "Video not found", "NotFoundError")
        if job.record["status"] == "failed":
            code = int((job.record.get("error") or {}).get("code") or 500)
            return JSONResponse(dict(job.record), code)
        return JSONResponse(dict(job.record))

    async def delete(request: Request) -> Response:
        video_id = request.path_params["video_id"]
        job = engine.jobs.get(video_id)
        if job is None:
            return _error(404, "Video not found", "NotFoundError")
        if job.task is not None and not job.task.done():
            job.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await job.task
        engine.jobs.pop(video_id, None)
        return JSONResponse({"id": video_id, "deleted": True, "object": "video.deleted"})

    async def content(request: Request) -> Response:
        video_id = request.path_params["video_id"]
        job = engine.jobs.get(video_id)
        if job is None:
            return _error(404, "Video not found", "NotFoundError")
        if job.record["status"] == "failed":
            return _error(422, "Video generation failed. Check job status for error details.", "UnprocessableEntity")
        if job.video is None:
            return _error(404, "Generation is still in-progress", "NotFoundError")
        headers = {"Content-Disposition": f'attachment; filename="{job.record["file_name"]}"'}
        return Response(job.video, media_type="video/mp4", headers=headers)

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/videos/sync", sync, methods=["POST"]),
        Route("/v1/videos", create, methods=["POST"]),
        Route("/v1/videos", list_jobs, methods=["GET"]),
        Route("/v1/videos/{video_id}", retrieve, methods=["GET"]),
        Route("/v1/videos/{video_id}", delete, methods=["DELETE"]),
        Route("/v1/videos/{video_id}/content", content, methods=["GET"]),
    ]
    app = Starlette(routes=routes)
    return _TimeScaleHeader(app, config.time_scale), engine


async def _run_job(engine: TwinEngine, job: Job, workload: Workload, stage_metrics: bool) -> None:
    record = job.record

    async def started() -> None:
        record["status"] = "in_progress"

    try:
        done = await engine.generate(workload, on_started=started)
    except GuardrailViolation as exc:
        record.update(status="failed", completed_at=int(time.time()), error={"code": 400, "message": str(exc)})
        return
    except Exception as exc:  # the twin's own bug: surface it like vLLM-Omni does (500)
        record.update(status="failed", completed_at=int(time.time()), error={"code": 500, "message": str(exc)})
        return
    job.video = done.video
    record.update(
        status="completed",
        progress=100,
        file_name=f"{record['id']}.mp4",
        completed_at=int(time.time()),
        inference_time_s=done.inference_time_s,
        stage_durations=done.stage_durations,
        peak_memory_mb=done.peak_memory_mb,
    )
    if stage_metrics:
        record["metrics"] = {"stage_durations": done.stage_durations, "peak_memory_mb": done.peak_memory_mb}


# ---- serving --------------------------------------------------------------------------------------
def replica_count(config: TwinConfig, replicas: int | None) -> int:
    """--replicas N wins; else the plan's Nx prefix; else one."""
    if replicas is not None:
        if replicas < 1:
            raise InvalidInput("replicas", replicas, "a positive integer")
        return replicas
    return Plan.parse(config.plan).replicas


async def serve(config: TwinConfig, host: str = "127.0.0.1", port: int = 8000, replicas: int | None = None) -> None:
    """Serve N independent replicas on consecutive ports until SIGINT/SIGTERM."""
    import uvicorn

    count = replica_count(config, replicas)
    profile = resolve_profile(config.gpu, config.profile_path)
    # encode the model's default clip now (part of "loading"), not inside the first request's time
    default = anchor_workload(config.model)
    make_mp4(default.width, default.height, default.num_frames, default.fps)

    class _Server(uvicorn.Server):
        # one process, several servers: signals are handled once below, for all of them
        @contextlib.contextmanager
        def capture_signals(self) -> Any:
            yield

    servers = []
    for i in range(count):
        app, _ = create_app(config.model_copy(update={"seed": config.seed + i}), profile)
        uv_config = uvicorn.Config(app, host=host, port=port + i, log_level="warning", lifespan="off")
        servers.append(_Server(uv_config))

    def stop() -> None:
        for server in servers:
            server.should_exit = True

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop)
    await asyncio.gather(*(server.serve() for server in servers))
