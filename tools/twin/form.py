"""The twin's request parsing: vLLM-Omni 0.30's multipart form for /v1/videos, validated as the real server does.

Two layers, as on the real server, each with its own error body:
- the form itself (FastAPI's typed `Form(...)` parameters of `_parse_video_form`,
  vllm_omni/entrypoints/openai/video/generation/helpers.py): a value of the wrong type, a `size` or `seconds`
  that does not match its pattern, `fps` below 1 or not finite. vLLM's RequestValidationError handler
  (vllm/entrypoints/serve/exception_handling/handlers/validation.py) answers 400 with type "Bad Request",
  `param` "body.<field>" and a message listing the errors;
- the request model (`VideoGenerationRequest`, vllm_omni/entrypoints/openai/protocol/videos.py): ranges
  such as num_inference_steps 1-200, guidance_scale 0-20, seed within int64, quality lossless|high. Its
  pydantic ValidationError is a ValueError, which vLLM's fallback handler answers as 400 "BadRequestError"
  with pydantic's own text (vllm/entrypoints/serve/exception_handling/error_response.py).
Everything else the handler refuses is an HTTPException: type = the HTTP status phrase (handlers/http.py).
"""

from __future__ import annotations

import json
import math
import re
import struct
from http import HTTPStatus
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator
from starlette.responses import JSONResponse

from worldtune.tools.twin.engine import TwinRequest
from worldtune.tools.words.models import ModelSpec

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
QUALITY_LEVELS = ("lossless", "high")  # vllm_omni/inputs/data.py DIFFUSION_QUALITY_LEVELS
DEFAULT_FPS = 24.0  # protocol/videos.py DEFAULT_FPS: what a job record shows when fps is not sent
DEFAULT_SEED = 42  # pipeline_cosmos3.py `_resolve_seed`
MAX_I2V_AREA = 720 * 1280  # pipeline_cosmos3.py: an I2V request without a size takes the image's aspect at this area
SizeStr = Annotated[str, StringConstraints(pattern=r"^\d+x\d+$")]
SecondStr = Annotated[str, StringConstraints(pattern=r"^[1-9]\d*$")]


class ApiError(Exception):
    """An answer that refuses the request: the status and the JSON body vLLM-Omni sends."""

    def __init__(self, response: JSONResponse) -> None:
        super().__init__(bytes(response.body).decode())
        self.response = response


def sanitize(message: str) -> str:
    """vLLM's sanitize_message (serve/exception_handling/utils.py): no addresses, tracebacks or file paths."""
    message = re.sub(r" at 0x[0-9a-f]+>", ">", message)
    message = re.sub(r'\n?\s*File "[^"]+", line \d+, in \S+(\n\s+.*)?', "", message)
    message = re.sub(r"/(?:home|usr|opt|var|tmp|root|lib|mnt|srv)(?:/[\w.\-]+)+", "<path>", message)
    message = re.sub(r"(?:/[\w\-]+)+/[\w\-]+\.\w+", "<path>", message)
    return message.strip()


def error_body(status: int, message: str, kind: str | None = None, param: str | None = None) -> JSONResponse:
    """vLLM's ErrorResponse; `kind` defaults to the status phrase, as for an HTTPException."""
    kind = kind or HTTPStatus(status).phrase
    body = {"error": {"message": sanitize(message), "type": kind, "param": param, "code": status}}
    return JSONResponse(body, status)


def http_error(status: int, detail: str) -> ApiError:
    return ApiError(error_body(status, detail))


def validation_error(exc: ValidationError, where: str) -> ApiError:
    """A RequestValidationError's answer: every error listed, `param` the first one's location."""
    errors: list[dict[str, Any]] = []
    for raw in exc.errors(include_url=False):
        err: dict[str, Any] = dict(raw)
        err["loc"] = ".".join(str(p) for p in (where, *raw["loc"]))
        if raw["type"] == "missing":
            # FastAPI validates each form field alone; vLLM-Omni 0.30's answer shows a missing one's input as the
            # string 'None' (seen on the real server: tests/integration/test_real_engine_twin_diff.py)
            err["input"] = "None"
        ctx = {k: v for k, v in (raw.get("ctx") or {}).items() if k != "error"}  # no exception reprs on the wire
        if ctx:
            err["ctx"] = ctx
        else:
            err.pop("ctx", None)
        errors.append(err)
    label = "error" if len(errors) == 1 else "errors"
    message = f"{len(errors)} validation {label}:\n" + "".join(f"  {err}\n" for err in errors[:10])
    return ApiError(error_body(400, message.rstrip(), "Bad Request", str(errors[0]["loc"]) if errors else None))


class VideoForm(BaseModel):
    """The typed form parameters (FastAPI Form(...) of `_parse_video_form`): types and form-level bounds only."""

    model_config = ConfigDict(extra="ignore")

    prompt: str
    model: str | None = None
    seconds: SecondStr | None = None
    size: SizeStr | None = None
    user: str | None = None
    width: int | None = None
    height: int | None = None
    num_frames: int | None = None
    fps: float | None = Field(default=None, ge=1, allow_inf_nan=False)
    aspect_ratio: str | None = None
    short_edge: int | None = Field(default=None, ge=1)
    num_outputs_per_prompt: int = Field(default=1, ge=1, le=10)
    start_time_seconds: float | None = Field(default=None, ge=0.0)
    quality: str | None = None
    num_inference_steps: int | None = None
    guidance_scale: float | None = None
    guidance_scale_2: float | None = None
    boundary_ratio: float | None = None
    flow_shift: float | None = None
    true_cfg_scale: float | None = None
    seed: int | None = None
    generate_sound: bool | None = None
    sound_duration: float | None = Field(default=None, gt=0.0)
    negative_prompt: str | None = None
    lora: str | None = None
    extra_params: str | None = None
    return_stage_metrics: bool | None = None
    image_reference: str | None = None
    video_reference: str | None = None


class VideoGenerationRequest(BaseModel):
    """The request model's ranges (protocol/videos.py); named as the real class, since pydantic's text says it."""

    prompt: str
    model: str | None = None
    seconds: str | None = None
    size: str | None = None
    width: int | None = Field(default=None, ge=1, le=INT64_MAX)
    height: int | None = Field(default=None, ge=1, le=INT64_MAX)
    fps: float | None = Field(default=None, ge=1, le=INT64_MAX, allow_inf_nan=False)
    num_frames: int | None = Field(default=None, ge=1, le=INT64_MAX)
    num_outputs_per_prompt: int = Field(default=1, ge=1, le=10)
    quality: str | None = None
    negative_prompt: str | None = None
    num_inference_steps: int | None = Field(default=None, ge=1, le=200)
    guidance_scale: float | None = Field(default=None, ge=0.0, le=20.0)
    guidance_scale_2: float | None = Field(default=None, ge=0.0, le=20.0)
    boundary_ratio: float | None = Field(default=None, ge=0.0, le=1.0)
    flow_shift: float | None = None
    true_cfg_scale: float | None = Field(default=None, ge=0.0, le=20.0)
    seed: int | None = Field(default=None, ge=INT64_MIN, le=INT64_MAX)
    lora: dict[str, Any] | None = None
    extra_params: dict[str, Any] | None = None
    return_stage_metrics: bool | None = None

    @field_validator("quality")
    @classmethod
    def _quality(cls, value: str | None) -> str | None:
        if value is not None and value not in QUALITY_LEVELS:
            raise ValueError(f"quality must be one of {list(QUALITY_LEVELS)}, got {value!r}")
        return value


def _json_field(raw: str | None, expect_dict: bool) -> Any:
    """helpers.py `_parse_form_json`: invalid JSON or the wrong type is an HTTPException 400."""
    if raw is None or raw == "":
        return None
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError:
        raise http_error(400, "Invalid JSON in form field.") from None
    if expect_dict and not isinstance(parsed, dict):
        raise http_error(400, f"Invalid JSON in form field: expected dict, got {type(parsed).__name__}.")
    return parsed


def parse_request(fields: dict[str, str]) -> VideoGenerationRequest:
    """Validate the form as the real server does; ApiError with its answer when it refuses."""
    # FastAPI treats an empty form value as not sent
    present = {k: v for k, v in fields.items() if v != ""}
    try:
        form = VideoForm.model_validate(present)
    except ValidationError as exc:
        raise validation_error(exc, "body") from None
    _json_field(form.image_reference, False)
    _json_field(form.video_reference, False)
    data = form.model_dump(exclude_none=True, exclude={"image_reference", "video_reference"})
    data["lora"] = _json_field(form.lora, True)
    data["extra_params"] = _json_field(form.extra_params, True)
    try:
        return VideoGenerationRequest.model_validate({k: v for k, v in data.items() if v is not None})
    except ValidationError as exc:  # a ValueError: vLLM's fallback handler, 400 BadRequestError with pydantic's text
        raise ApiError(error_body(400, str(exc), "BadRequestError")) from None


def image_size(data: bytes) -> tuple[int, int] | None:
    """Width and height of a PNG or JPEG upload (None when it is neither)."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        width, height = struct.unpack(">II", data[16:24])
        return int(width), int(height)
    if data[:2] != b"\xff\xd8":
        return None
    i = 2
    while i + 9 < len(data):
        if data[i] != 0xFF:
            i += 1
            continue
        marker = data[i + 1]
        length = struct.unpack(">H", data[i + 2 : i + 4])[0]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):  # a start-of-frame segment
            height, width = struct.unpack(">HH", data[i + 5 : i + 9])
            return int(width), int(height)
        i += 2 + length
    return None


def resolve(req: VideoGenerationRequest, spec: ModelSpec, image: tuple[int, int] | None) -> TwinRequest:
    """The engine's request: the form's values, else the defaults vLLM-Omni and the Cosmos 3 pipeline apply."""
    width, height = req.width, req.height
    if req.size:
        w, _, h = req.size.partition("x")
        width, height = int(w), int(h)
    if image is not None and (width is None or height is None):
        aspect = image[1] / image[0]
        width = width or round(math.sqrt(MAX_I2V_AREA / aspect)) // 16 * 16
        height = height or round(math.sqrt(MAX_I2V_AREA * aspect)) // 16 * 16
    fps = req.fps or DEFAULT_FPS
    frames = req.num_frames
    if frames is None and req.seconds is not None:
        frames = int(float(req.seconds) * fps)  # protocol/videos.py resolve_video_params
    extra = req.extra_params or {}
    msl = extra.get("max_sequence_length")
    guard = extra.get("guardrails")
    return TwinRequest(
        prompt=req.prompt,
        width=width or spec.default_width,
        height=height or spec.default_height,
        num_frames=frames or spec.default_frames,
        fps=float(req.fps) if req.fps is not None else float(spec.default_fps),
        steps=req.num_inference_steps or spec.default_steps,
        guidance_scale=req.guidance_scale if req.guidance_scale is not None else spec.default_guidance,
        flow_shift=req.flow_shift if req.flow_shift is not None else spec.default_flow_shift,
        seed=req.seed if req.seed is not None else DEFAULT_SEED,
        negative_prompt=req.negative_prompt or "",
        # only extra_params carries it: a top-level max_sequence_length is not a form field and is ignored
        max_sequence_length=msl if isinstance(msl, int) and msl > 0 else 4096,
        guardrails=True if guard is None else bool(guard),
        image=image,
    )


def job_record(req: VideoGenerationRequest, model_name: str, video_id: str, created_at: int) -> dict[str, Any]:
    """The queued job as `video_response_from_request` (helpers.py) makes it: nulls for what was not sent."""
    fps = req.fps or DEFAULT_FPS
    frames = req.num_frames
    if frames is None and req.seconds is not None:
        frames = int(float(req.seconds) * fps)
    duration: float | None = None
    if req.seconds is not None:
        duration = float(req.seconds)
    elif frames is not None:
        duration = frames / fps
    return {
        "model": model_name,
        "prompt": req.prompt,
        "id": video_id,
        "object": "video",
        "status": "queued",
        "size": req.size,
        "progress": 0,
        "seconds": str(req.seconds or "4"),
        "quality": req.quality or "default",
        "completed_at": None,
        "created_at": created_at,
        "remixed_from_video_id": None,
        "error": None,
        "media_type": "video/mp4",
        "expires_at": None,
        "file_name": None,
        "inference_time_s": None,
        "fps": float(fps),
        "num_frames": frames,
        "duration_s": duration,
        "metrics": None,
        "stage_durations": {},
        "peak_memory_mb": 0.0,
        "action": None,
    }
