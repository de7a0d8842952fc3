"""Goal: what a tuning run optimises (objective) and what it must respect (constraints)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from worldtune.tools.words.errors import InvalidInput, one_of
from worldtune.tools.words.gpus import get_gpu
from worldtune.tools.words.limits import MAX_BUDGET_USD
from worldtune.tools.words.offer import CAPACITIES
from worldtune.tools.words.traffic import Traffic
from worldtune.tools.words.workload import Workload

Objective = Literal["min_latency", "max_throughput", "min_cost_per_clip"]
PERCENTILES = (50, 90, 95, 99)
CONFIDENCE_RANGE = (0.5, 0.999)  # a claim at 50% says nothing; past 99.9% a p95 claim needs 135+ requests per plan
# What a better plan is worth is its saving per clip times the clips the answer will make. Without a figure from the
# goal: 30 days of its traffic, else about a month of one 8-GPU node's output at the anchor workload (~28 clips/h)
PRODUCTION_DAYS = 30
DEFAULT_PRODUCTION_CLIPS = 20_000.0
MAX_PRODUCTION_CLIPS = 1e9


class Goal(BaseModel):
    """Objective plus constraints: latency bound at a percentile, throughput floor, budget, allowed infra."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    objective: Objective = "min_cost_per_clip"
    workload: Workload = Field(default_factory=Workload)
    latency_bound_s: float | None = Field(default=None, gt=0)
    latency_percentile: int = 95
    throughput_floor_clips_per_hour: float | None = Field(default=None, gt=0)
    budget_usd: float = Field(default=300.0, gt=0, le=MAX_BUDGET_USD, description="most the search may spend")
    gpus: list[str] = Field(default_factory=lambda: ["H200", "B200"])
    infras: list[str] = Field(default_factory=list, description="allowed infra; empty = any")
    capacities: list[str] = Field(default_factory=lambda: ["on-demand"])
    max_gpus_per_node: int = Field(default=8, ge=1, le=8)
    traffic: Traffic | None = Field(default=None, description="arrivals and the end-to-end bound a fleet must meet")
    confidence: float = Field(
        default=0.95,
        allow_inf_nan=False,
        description="one level for the percentile claim and the stopping rule (order statistics), e.g. 0.99",
    )
    allow_fp8: bool = Field(
        default=False,
        description="quality-changing choices may be made (FP8 quantization of the generator): only when the goal "
        "says so ('fp8 ok'); BF16 otherwise, in the search and in a traffic goal's fleet alike",
    )
    answer_within_s: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="most modelled wall seconds from approval to a verified answer (provisioning, loads, requests)",
    )
    production_clips: float | None = Field(
        default=None,
        gt=0,
        le=MAX_PRODUCTION_CLIPS,
        allow_inf_nan=False,
        description="clips the answer will make in production: a measurement is bought only when the improvement "
        "it may find, times these clips' cost, exceeds its own cost (default: 30 days of the traffic, else 20,000)",
    )

    @field_validator("latency_percentile")
    @classmethod
    def _percentile(cls, value: int) -> int:
        if value not in PERCENTILES:
            raise one_of("latency_percentile", value, PERCENTILES)
        return value

    @field_validator("confidence")
    @classmethod
    def _confidence(cls, value: float) -> float:
        low, high = CONFIDENCE_RANGE
        if not low < value <= high:
            raise InvalidInput("confidence", value, f"a level above {low:g} and at most {high:g}, e.g. 0.95 or 0.99")
        return value

    @field_validator("gpus")
    @classmethod
    def _gpus(cls, value: list[str]) -> list[str]:
        if not value:
            raise InvalidInput("gpus", value, "at least one GPU type")
        return [get_gpu(v).name for v in value]

    @field_validator("capacities")
    @classmethod
    def _capacities(cls, value: list[str]) -> list[str]:
        if not value:
            raise InvalidInput("capacities", value, f"at least one of {', '.join(CAPACITIES)}")
        for cap in value:
            if cap not in CAPACITIES:
                raise one_of("capacity", cap, CAPACITIES)
        return value

    def describe(self) -> str:
        """One line a person can confirm."""
        parts = [
            self.objective.replace("_", " "),
            f"{self.workload.model} {self.workload.size} x{self.workload.num_frames}",
        ]
        if self.latency_bound_s:
            bound = f"p{self.latency_percentile} <= {self.latency_bound_s:g} s"
            parts.append(f"{bound} at {self.confidence * 100:g}% confidence")
        if self.throughput_floor_clips_per_hour:
            parts.append(f">= {self.throughput_floor_clips_per_hour:g} clips/h")
        parts.append(f"GPUs {'/'.join(self.gpus)}")
        parts.append(f"capacity {'/'.join(self.capacities)}")
        if self.infras:
            parts.append(f"infra {'/'.join(self.infras)}")
        parts.append(f"budget ${self.budget_usd:g}")
        if self.traffic is not None:
            parts.append(f"traffic {self.traffic.describe()}")
        if self.answer_within_s:
            parts.append(f"answer within {self.answer_within_s / 3600:g} h")
        if self.allow_fp8:
            parts.append("fp8 ok")
        if self.production_clips is not None:
            parts.append(f"for {self.production_clips:,.0f} clips")
        return ", ".join(parts)

    def production(self) -> tuple[float, str]:
        """The clips the answer will make (what a better plan's saving per clip is multiplied by), and whence."""
        if self.production_clips is not None:
            return self.production_clips, "the goal's"
        if self.traffic is not None and self.traffic.clips_per_day_mean > 0:
            return self.traffic.clips_per_day_mean * PRODUCTION_DAYS, f"{PRODUCTION_DAYS} days of the goal's traffic"
        return DEFAULT_PRODUCTION_CLIPS, "the default, about a month of one 8-GPU node (say 'for N clips')"
