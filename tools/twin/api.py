"""The twin's HTTP surface: vLLM-Omni 0.30's video routes, bodies, codes and headers over a TwinEngine.

Routes (REFERENCE.md section 3): GET /health, GET /v1/models, POST /v1/videos (async job), GET /v1/videos
(list), GET/DELETE /v1/videos/{id}, GET /v1/videos/{id}/content, POST /v1/videos/sync (MP4 body with
X-Request-Id, X-Model, X-Inference-Time-S, X-Stage-Durations, X-Peak-Memory-MB). Each handler names the real
one it follows (vllm_omni/entrypoints/openai/api_server.py unless said). An unknown route is Starlette's
404 in FastAPI's JSON form, `{"detail": "Not Found"}`. Every response carries `X-Twin-Time-Scale` so a
client can convert its wall clock back to model seconds; it is the one header the real server lacks.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import hashlib
import hmac
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders, UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from worldtune.tools.twin.engine import (
    ENGINE_DEAD_MESSAGE,
    EngineDead,
    Generated,
    GuardrailViolation,
    PipelineFailure,
    TwinConfig,
    TwinEngine,
    TwinRequest,
)
from worldtune.tools.twin.form import (
    ApiError,
    error_body,
    http_error,
    image_size,
    job_record,
    parse_request,
    resolve,
)
from worldtune.tools.words.bench_spec import CLIENT_TIME_HEADER, DONE_AT_HEADER
from worldtune.tools.words.bench_spec import (
    TIME_SCALE_HEADER as TIME_SCALE_HEADER,  # re-exported (tools/twin/server.py)
)
from worldtune.tools.words.profile import Profile


@dataclass
class Job:
    """An async job as GET /v1/videos/{id} shows it, plus its task and output."""

    record: dict[str, Any]
    task: asyncio.Task[None] | None = None
    video: bytes | None = None
    created: float = field(default_factory=time.time)
    done_at: dict[str, str] = field(default_factory=dict)  # the twin's engine clock header for the clip's download


class _TimeScaleHeader:
    """ASGI middleware: every response says the twin's time scale (clients convert wall to model time)."""

    def __init__(self, app: ASGIApp, scale: float) -> None:
        self.app = app
        self.value = f"{scale:g}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_header(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (TIME_SCALE_HEADER.lower().encode(), self.value)]
            await send(message)

        await self.app(scope, receive, send_with_header if scope["type"] == "http" else send)


def engine_dead_body(request_id: str | None) -> JSONResponse:
    """serve/utils/errors.py `_build_engine_error_payload`: EngineDeadError is a VLLMServerError (500)."""
    error = {
        "message": ENGINE_DEAD_MESSAGE,
        "type": "InternalServerError",
        "param": None,
        "code": 500,
        "request_id": request_id,
        "error_stage_id": None,
    }
    return JSONResponse({"error": error}, 500)


def model_card(model_name: str) -> dict[str, Any]:
    """models/serving.py `_DiffusionServingModels`: vLLM's ModelCard, made at each call, one ModelPermission."""
    now = int(time.time())
    permission = {
        "id": f"modelperm-{uuid.uuid4().hex}",
        "object": "model_permission",
        "created": now,
        "allow_create_engine": False,
        "allow_sampling": True,
        "allow_logprobs": True,
        "allow_search_indices": False,
        "allow_view": True,
        "allow_fine_tuning": False,
        "organization": "*",
        "group": None,
        "is_blocking": False,
    }
    # pure diffusion mode has no model config, so max_model_len is null
    return {
        "id": model_name,
        "object": "model",
        "created": now,
        "owned_by": "vllm",
        "root": model_name,
        "parent": None,
        "max_model_len": None,
        "permission": [permission],
    }


async def _read(request: Request, engine: TwinEngine) -> tuple[TwinRequest, Any]:
    """The `_parse_video_form` dependency (video/generation/helpers.py): form, request model, references."""
    try:
        form = await request.form()
    except Exception as exc:  # a body that is not a multipart form at all
        raise http_error(400, f"Malformed multipart form: {exc}") from None
    upload = form.get("input_reference")
    req = parse_request({k: v for k, v in form.items() if isinstance(v, str)})
    if req.model is not None and req.model != engine.spec.hf_id:
        raise http_error(
            400, f"Model mismatch: request specifies '{req.model}' but server is running '{engine.spec.hf_id}'."
        )
    image = None
    if isinstance(upload, UploadFile):
        image = image_size(await upload.read())
        if image is None:
            raise http_error(400, "Invalid input reference.")
    return resolve(req, engine.spec, image), req


class TwinApi:
    """The routes of one loaded replica over its engine; each handler names the real one it follows."""

    def __init__(self, config: TwinConfig, engine: TwinEngine, terminate: Callable[[], None] | None) -> None:
        self.config = config
        self.engine = engine
        self.terminate = terminate
        self.model_name = engine.spec.hf_id
        self.jobs: dict[str, Job] = {}

    def engine_died(self) -> None:
        # launcher.py terminate_if_errored: a dead engine shuts the server down unless told to stay
        if self.terminate is not None and not self.config.keep_alive_on_engine_death:
            self.terminate()

    async def health(self, request: Request) -> Response:
        # api_server.py health: 503 only for a missing or dead engine (a loading server does not listen)
        if self.engine.dead:
            return JSONResponse({"status": "unhealthy"}, 503)
        return JSONResponse({"status": "healthy"})

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [model_card(self.model_name)]})

    async def sync(self, request: Request) -> Response:
        """create_video_sync: blocks; its timeout counts queue time (VLLM_OMNI_VIDEO_SYNC_TIMEOUT -> 504)."""
        try:
            twin_request, _ = await _read(request, self.engine)
        except ApiError as exc:
            return exc.response
        request_id = f"video_sync-{uuid.uuid4().hex}"
        timeout = self.config.sync_timeout_s
        try:
            done = await self.engine.generate(twin_request, timeout_s=timeout)
        except TimeoutError:
            return error_body(504, f"Video generation timed out after {timeout}s.")
        except EngineDead:
            self.engine_died()
            return engine_dead_body(request_id)
        except GuardrailViolation as exc:  # an OmniClientError: HTTPException(400)
            return error_body(400, str(exc))
        except PipelineFailure as exc:
            return error_body(500, f"Video generation failed: {exc}")
        headers = {
            "X-Request-Id": request_id,
            "X-Model": self.model_name,
            "X-Inference-Time-S": f"{done.inference_time_s:.3f}",
            "X-Stage-Durations": json.dumps(done.stage_durations, separators=(",", ":")),
            "X-Peak-Memory-MB": f"{done.peak_memory_mb:.3f}",
            **_done_at(done),
        }
        return Response(done.video, media_type="video/mp4", headers=headers)

    async def create(self, request: Request) -> Response:
        """create_video: the queued job at once, generation in a background task."""
        try:
            twin_request, req = await _read(request, self.engine)
        except ApiError as exc:
            return exc.response
        video_id = f"video_gen_{uuid.uuid4().hex}"
        job = Job(record=job_record(req, self.model_name, video_id, int(time.time())))
        self.jobs[video_id] = job
        metrics = bool(req.return_stage_metrics)
        job.task = asyncio.create_task(_run_job(self.engine, job, twin_request, metrics, self.engine_died))
        return JSONResponse(dict(job.record))

    async def list_jobs(self, request: Request) -> Response:
        """list_videos: `order` asc|desc and `limit` 0-100 are query parameters FastAPI validates."""
        query = request.query_params
        problems = []
        if query.get("order", "desc") not in ("asc", "desc"):
            problems.append(("order", query["order"], "literal_error", "Input should be 'asc' or 'desc'"))
        limit = query.get("limit")
        if limit is not None and not (limit.isdigit() and int(limit) <= 100):
            problems.append(("limit", limit, "less_than_equal", "Input should be a valid integer from 0 to 100"))
        if problems:
            name, value, kind, msg = problems[0]
            message = (
                f"1 validation error:\n  {{'type': '{kind}', 'loc': 'query.{name}', 'msg': '{msg}', "
                f"'input': '{value}'}}"
            )
            return error_body(400, message, "Bad Request", f"query.{name}")
        found = sorted(self.jobs.values(), key=lambda j: j.record["created_at"], reverse=query.get("order") != "asc")
        after = query.get("after")
        if after is not None:
            ids = [j.record["id"] for j in found]
            found = found[ids.index(after) + 1 :] if after in ids else []
        has_more = limit is not None and len(found) > int(limit)
        found = found[: int(limit)] if limit is not None else found
        data = [dict(j.record) for j in found]
        return JSONResponse(  # the real server's key order
            {
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None,
                "has_more": has_more,
                "data": data,
                "object": "list",
            }
        )

    async def retrieve(self, request: Request) -> Response:
        job = self.jobs.get(request.path_params["video_id"])
        if job is None:
            return error_body(404, "Video not found")
        if job.record["status"] == "failed":  # the job's body with the failure's own status code
            code = int((job.record.get("error") or {}).get("code") or 500)
            return JSONResponse(dict(job.record), code if 400 <= code < 600 else 500)
        return JSONResponse(dict(job.record))

    async def delete(self, request: Request) -> Response:
        video_id = request.path_params["video_id"]
        job = self.jobs.get(video_id)
        if job is None:
            return error_body(404, "Video not found")
        if job.task is not None and not job.task.done():  # abort the in-flight request, then forget it
            job.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await job.task
        self.jobs.pop(video_id, None)
        return JSONResponse({"id": video_id, "deleted": True, "object": "video.deleted"})

    async def content(self, request: Request) -> Response:
        video_id = request.path_params["video_id"]
        job = self.jobs.get(video_id)
        if job is None:
            return error_body(404, "Video not found")
        if job.record["status"] == "failed":
            return error_body(422, "Video generation failed. Check job status for error details.")
        if job.video is None:
            return error_body(404, "Generation is still in-progress")
        # vLLM-Omni serves the stored file (a FileResponse): its range, date and entity-tag headers come with it
        done = float(job.record.get("completed_at") or time.time())
        tag = hashlib.md5(f"{done}-{len(job.video)}".encode(), usedforsecurity=False).hexdigest()
        headers = {
            "Accept-Ranges": "bytes",
            "Content-Disposition": f'attachment; filename="{job.record["file_name"]}"',
            "Last-Modified": email.utils.formatdate(done, usegmt=True),
            "ETag": f'"{tag}"',
            **job.done_at,
        }
        return Response(job.video, media_type="video/mp4", headers=headers)

    @staticmethod
    async def not_found(request: Request, exc: Exception) -> Response:
        # FastAPI's default handler for Starlette's HTTPException (unknown route, wrong method)
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        detail = exc.detail if isinstance(exc, HTTPException) else "Internal Server Error"
        return JSONResponse({"detail": detail}, status)

    def routes(self) -> list[Route]:
        return [
            Route("/health", self.health, methods=["GET"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/v1/videos/sync", self.sync, methods=["POST"]),
            Route("/v1/videos", self.create, methods=["POST"]),
            Route("/v1/videos", self.list_jobs, methods=["GET"]),
            Route("/v1/videos/{video_id}", self.retrieve, methods=["GET"]),
            Route("/v1/videos/{video_id}", self.delete, methods=["DELETE"]),
            Route("/v1/videos/{video_id}/content", self.content, methods=["GET"]),
        ]


class _VaryOrigin:
    """The real server's answers past its key check carry `vary: Origin` (its CORS middleware); its 401s do not."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_vary(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message).append("vary", "Origin")
            await send(message)

        await self.app(scope, receive, with_vary)


class _ApiKey:
    """vLLM's --api-key (entrypoints/openai/api_server.py AuthenticationMiddleware): every /v1 request needs
    `Authorization: Bearer KEY`, else 401 {"error": "Unauthorized"}; /health stays open."""

    def __init__(self, app: ASGIApp, key: str) -> None:
        self.app = app
        self.expected = f"Bearer {key}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and str(scope.get("path", "")).startswith("/v1"):
            given = dict(scope.get("headers", [])).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                await JSONResponse({"error": "Unauthorized"}, 401)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_app(
    config: TwinConfig, profile: Profile | None = None, terminate: Callable[[], None] | None = None
) -> tuple[ASGIApp, TwinEngine]:
    """The ASGI app of one loaded replica and its engine; `terminate` stops the server (a dead engine)."""
    engine = TwinEngine(config, profile)
    api = TwinApi(config, engine, terminate)
    app: ASGIApp = _VaryOrigin(Starlette(routes=api.routes(), exception_handlers={HTTPException: api.not_found}))
    if config.api_key:
        app = _ApiKey(app, config.api_key)
    return _TimeScaleHeader(app, config.time_scale), engine


def _done_at(done: Generated) -> dict[str, str]:
    """The twin-only clock headers: when the answer was done, and the client's end-to-end model seconds."""
    out = {} if done.done_at_model_s is None else {DONE_AT_HEADER: f"{done.done_at_model_s:.3f}"}
    if done.client_time_s is not None:
        out[CLIENT_TIME_HEADER] = f"{done.client_time_s:.3f}"
    return out


async def _run_job(
    engine: TwinEngine, job: Job, request: TwinRequest, stage_metrics: bool, engine_died: Callable[[], None]
) -> None:
    """helpers.py `_run_video_generation_job`: the job's fields as the real one updates them."""
    record = job.record
    started = time.monotonic()

    async def mark_started() -> None:
        record["status"] = "in_progress"

    def failed(code: int, message: str) -> None:
        record.update(
            status="failed",
            completed_at=int(time.time()),
            error={"code": code, "message": message},
            inference_time_s=(time.monotonic() - started) * engine.scale,
        )

    try:
        done: Generated = await engine.generate(request, on_started=mark_started)
    except GuardrailViolation as exc:
        return failed(400, str(exc))
    except EngineDead:
        failed(500, ENGINE_DEAD_MESSAGE)
        return engine_died()
    except PipelineFailure as exc:
        return failed(500, str(exc))
    except Exception as exc:  # helpers.py: any other failure is the job's, with code 500 (never a job left hanging)
        return failed(500, str(exc))
    job.video = done.video
    job.done_at = _done_at(done)
    record.update(
        status="completed",
        progress=100,
        file_name=f"{record['id']}.mp4",
        completed_at=int(time.time()),
        inference_time_s=done.inference_time_s,
        stage_durations=done.stage_durations,
        peak_memory_mb=done.peak_memory_mb,
        # serving_video.py `_video_metadata_from_artifacts`: frames and fps of the clip made, not of the request
        fps=done.fps,
        num_frames=done.num_frames,
        duration_s=done.num_frames / done.fps,
    )
    if stage_metrics:
        record["metrics"] = {"stage_durations": done.stage_durations, "peak_memory_mb": done.peak_memory_mb}
