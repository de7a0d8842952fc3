"""Workload: what one video request is. The anchor workload (REFERENCE.md section 4) is the default."""

from __future__ import annotations

import json
import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.models import ANCHOR_FRAMES, ANCHOR_HEIGHT, ANCHOR_WIDTH, get_model

# Sizes Cosmos 3's resolution table knows (vLLM-Omni 0.30, model cosmos3 utils), width x height.
SUPPORTED_SIZES: tuple[tuple[int, int], ...] = (
    (256, 256),
    (320, 256),
    (256, 320),
    (320, 192),
    (192, 320),
    (640, 640),
    (736, 544),
    (544, 736),
    (832, 480),
    (480, 832),
    (960, 960),
    (1088, 832),
    (832, 1088),
    (1280, 704),
    (704, 1280),
    (1104, 832),
    (832, 1104),
    (1280, 720),
    (720, 1280),
)
SUPPORTED_FPS = (10, 16, 24, 30)
VAE_TEMPORAL = 4  # the Wan VAE compresses time 4x
SPATIAL_DOWN = 32  # VAE 16x times the 2x2 patch

ANCHOR_PROMPT = (
    "A humanoid robot walks through a sunlit warehouse, picks up a cardboard box from a metal shelf, "
    "turns, and places it carefully on a moving conveyor belt. The camera tracks the robot at chest "
    "height with a slow dolly move. Dust particles float in the light beams from high windows; "
    "forklifts pass in the background; the floor is polished concrete with yellow safety lines. "
    "Photorealistic, natural lighting, steady motion, sharp details."
)
ANCHOR_NEGATIVE_PROMPT = (
    "blurry, low resolution, distorted, deformed hands, flickering, jitter, watermark, text, "
    "oversaturated, cartoon, static frame"
)
ANCHOR_EXTRA_PARAMS: dict[str, Any] = {
    "use_resolution_template": False,
    "use_duration_template": False,
    "guardrails": False,
}


def _size_list() -> str:
    return ", ".join(f"{w}x{h}" for w, h in SUPPORTED_SIZES)


class Workload(BaseModel):
    """One video request: model, task, size, frames, fps, steps, guidance, seed, prompt, guardrails."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    model: str = "cosmos3-super"
    task: Literal["t2v", "i2v"] = "t2v"
    width: int = ANCHOR_WIDTH
    height: int = ANCHOR_HEIGHT
    num_frames: int = Field(default=ANCHOR_FRAMES, ge=5, le=300)
    fps: int = 24
    steps: int = Field(default=35, ge=1, le=200, description="num_inference_steps")
    guidance_scale: float = Field(default=6.0, ge=0.0, le=20.0)
    flow_shift: float = Field(default=10.0, gt=0.0, le=100.0, description="the scheduler's timestep shift")
    seed: int = Field(default=17, ge=-(2**63), le=2**63 - 1, description="a signed 64-bit integer, as vLLM-Omni takes")
    prompt: str = ANCHOR_PROMPT
    negative_prompt: str = ANCHOR_NEGATIVE_PROMPT
    guardrails: bool = False
    max_sequence_length: int = Field(default=4096, ge=1, le=4096)

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        return get_model(value).key

    @field_validator("fps")
    @classmethod
    def _known_fps(cls, value: int) -> int:
        if value not in SUPPORTED_FPS:
            raise InvalidInput("fps", value, f"expected one of {SUPPORTED_FPS}")
        return value

    @model_validator(mode="after")
    def _known_size(self) -> Workload:
        if (self.width, self.height) not in SUPPORTED_SIZES:
            raise InvalidInput(
                "size", f"{self.width}x{self.height}", f"Cosmos 3 supports {_size_list()}", "720p is 1280x720"
            )
        spec = get_model(self.model)
        if self.task not in spec.tasks:
            raise InvalidInput("task", self.task, f"{spec.key} supports {', '.join(spec.tasks)}")
        if spec.distilled and self.guidance_scale != 1.0:
            raise InvalidInput(
                "guidance_scale", self.guidance_scale, "distilled checkpoints force guidance 1.0", "set 1.0"
            )
        return self

    # ---- derived sizes -------------------------------------------------------------------------
    @property
    def size(self) -> str:
        return f"{self.width}x{self.height}"

    @property
    def latent_frames(self) -> int:
        return (self.num_frames - 1) // VAE_TEMPORAL + 1

    @property
    def latent_grid(self) -> tuple[int, int]:
        """Latent height x width after the VAE and the 2x2 patch (odd halves are padded up)."""
        return math.ceil(self.height / SPATIAL_DOWN), math.ceil(self.width / SPATIAL_DOWN)

    @property
    def video_tokens(self) -> int:
        """Generator tokens per CFG branch: 720p x 189 frames -> 48 x 23 x 40 = 44,160."""
        h, w = self.latent_grid
        return self.latent_frames * h * w

    @property
    def prompt_tokens(self) -> int:
        """Text tokens the video tokens attend to (padded to max_sequence_length by the encoder)."""
        return self.max_sequence_length

    @property
    def prompt_words(self) -> int:
        return len(self.prompt.split())

    @property
    def pixels_x_frames(self) -> int:
        return self.width * self.height * self.num_frames

    @property
    def video_seconds(self) -> float:
        return self.num_frames / self.fps

    @property
    def cfg_branches(self) -> int:
        """Guidance above 1 runs a conditional and an unconditional pass per step."""
        return 2 if self.guidance_scale > 1.0 else 1

    # ---- the wire form of vLLM-Omni's POST /v1/videos ------------------------------------------
    def form_fields(self) -> dict[str, str]:
        """Multipart form fields as vLLM-Omni 0.30 reads them (max_sequence_length inside extra_params)."""
        extra = dict(ANCHOR_EXTRA_PARAMS)
        extra["guardrails"] = self.guardrails
        extra["max_sequence_length"] = self.max_sequence_length
        return {
            "prompt": self.prompt,
            "negative_prompt": self.negative_prompt,
            "size": self.size,
            "num_frames": str(self.num_frames),
            "fps": str(self.fps),
            "num_inference_steps": str(self.steps),
            "guidance_scale": str(self.guidance_scale),
            "flow_shift": str(self.flow_shift),
            "seed": str(self.seed),
            "extra_params": json.dumps(extra, sort_keys=True),
        }

    def with_changes(self, **changes: Any) -> Workload:
        """A copy with some fields changed, validated again."""
        data = self.model_dump()
        data.update(changes)
        return Workload.model_validate(data)


def anchor_workload(model: str = "cosmos3-super", **changes: Any) -> Workload:
    """The controlled benchmark's workload for a model, with the model's own video defaults."""
    spec = get_model(model)
    base: dict[str, Any] = {
        "model": spec.key,
        "task": spec.tasks[0],
        "width": spec.default_width,
        "height": spec.default_height,
        "num_frames": spec.default_frames,
        "fps": spec.default_fps,
        "steps": spec.default_steps,
        "guidance_scale": spec.default_guidance,
        "flow_shift": spec.default_flow_shift,
    }
    base.update(changes)
    return Workload.model_validate(base)


def anchor_changes(workload: Workload) -> dict[str, Any]:
    """The fields where `workload` differs from its model's anchor workload (what a tool call must name).

    `model` and `steps` are left out: a deployment fixes the model, and a benchmark sets steps per phase.
    """
    anchor = anchor_workload(workload.model)
    return {k: v for k, v in workload.model_dump().items() if k not in ("model", "steps") and v != getattr(anchor, k)}
