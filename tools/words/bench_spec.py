"""What a benchmark is asked to do (BenchmarkSpec) and where it stands (BenchmarkStatus): the words of the
benchmark capability, shared by its request loop (tools/bench/runner.py) and its job API (tools/bench/benchmark.py).
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.limits import (
    MAX_LEVELS,
    MAX_PLANNED_REQUESTS,
    MAX_POISSON_REQUESTS,
    MAX_PROBES,
    MAX_REPEATS,
    at_most,
)
from worldtune.tools.words.result import BenchmarkResult
from worldtune.tools.words.workload import Workload, anchor_workload

ApiKind = Literal["sync", "async"]
TIME_SCALE_HEADER = "X-Twin-Time-Scale"  # the twin's K: its wall times are model seconds / K (every response)
# The twin's engine clock (model seconds) when an answer was done: its simulated stage times while busy, so a loaded
# machine does not stretch it. Twin-only, like the time scale: a real vLLM-Omni server sends neither.
DONE_AT_HEADER = "X-Twin-Done-At"
# The client's end-to-end model seconds of the answer on the same clock (queue + the server's time + the part outside
# the engine: encode, transfer), so a claim judges the client's clock without the loaded machine's jitter. Twin-only.
CLIENT_TIME_HEADER = "X-Twin-Client-Time-S"
READY_TIMEOUT_S = 1800.0  # wall seconds to wait for /health (vLLM-Omni's --init-timeout for Super)
# vLLM-Omni's POST /v1/videos/sync gives up after VLLM_OMNI_VIDEO_SYNC_TIMEOUT (default 600 s; queue time counts,
# REFERENCE.md section 3); its job API (POST /v1/videos, poll, GET content) has no such bound. The twin's default.
SYNC_TIMEOUT_S = 600.0
# A request predicted to take (with the queue ahead of it) more than this share of the sync timeout is sent as a
# job: the prediction of a plan not yet measured can be off by tens of percent (an 830 s clip once failed every
# sync request of a claim: issue 39), and a job costs only its polls.
SYNC_SHARE = 2.0 / 3.0


def api_for(expected_latency_s: float | None, queue: int = 1, sync_timeout_s: float = SYNC_TIMEOUT_S) -> ApiKind:
    """The API a benchmark should use: "async" (a job per request) when `queue` clips of `expected_latency_s` model
    seconds could outlast the sync timeout, else "sync" (one blocking call, what the published cells measured).
    Unknown latency: sync, as before."""
    if expected_latency_s is not None and expected_latency_s * max(1, queue) > SYNC_SHARE * sync_timeout_s:
        return "async"
    return "sync"


def check_measures(full: bool, probe_steps: Sequence[int], poisson_rate_per_hour: float | None = None) -> None:
    """Refuse a benchmark with nothing to measure: no full-step levels (`full` false), no probes and no arrivals."""
    if not full and not probe_steps and not poisson_rate_per_hour:
        raise InvalidInput("full", False, "true, or false with probe_steps or Poisson arrivals to measure")


def new_benchmark_id() -> str:
    return f"bm-{secrets.token_hex(4)}"


class BenchmarkSpec(BaseModel):
    """What to measure, against which endpoints, and how hard to push."""

    model_config = ConfigDict(extra="forbid")

    endpoints: list[str] = Field(min_length=1, description="base URLs, one per replica (http://host:port)")
    workload: Workload = Field(default_factory=anchor_workload, description="the request; steps set below")
    steps: int = Field(default=35, ge=1, le=200, description="full-step count of the measured runs")
    repeats: int = Field(
        default=3, ge=1, le=MAX_REPEATS, description="requests per client per level, and per probe step count"
    )
    concurrency: list[int] = Field(
        default_factory=lambda: [1], max_length=MAX_LEVELS, description="closed-loop levels (clients)"
    )
    poisson_rate_per_hour: float | None = Field(default=None, gt=0, description="open-loop arrivals per hour")
    poisson_requests: int = Field(default=20, ge=1, le=MAX_POISSON_REQUESTS)
    seed: int = Field(default=17, description="seed of the Poisson arrivals")
    probe_steps: list[int] = Field(
        default_factory=lambda: [4, 8], max_length=MAX_PROBES, description="short step counts for the fit"
    )
    warmup: int = Field(default=2, ge=0, le=100, description="warm-up requests per endpoint (not counted)")
    warmup_steps: int | None = Field(default=None, ge=1, le=200, description="default: the smallest probe")
    full: bool = Field(default=True, description="run the full-step closed-loop levels")
    check_video: bool = True
    api: ApiKind = Field(
        default="sync", description="sync: POST /v1/videos/sync; async: create a job, poll, download, delete"
    )
    expected_latency_s: float | None = Field(
        default=None, gt=0, description="model seconds at `steps` before anything is measured (e.g. an estimate)"
    )
    timeout_factor: float = Field(default=3.0, ge=1.0, description="client timeout = expected queue x this + margin")
    timeout_margin_s: float = Field(default=120.0, ge=0, description="model seconds added to every client timeout")
    timeout_wall_margin_s: float = Field(default=10.0, ge=0, description="wall seconds added to every client timeout")
    ready_timeout_s: float = Field(
        default=READY_TIMEOUT_S, gt=0, description="wall seconds to wait for every /health to answer 200"
    )
    deployment_id: str | None = None
    plan: str | None = Field(default=None, description="the deployment's plan when measured (a node can be replanned)")
    run_id: str | None = None
    label: str = ""

    @field_validator("endpoints")
    @classmethod
    def _urls(cls, value: list[str]) -> list[str]:
        out = []
        for url in value:
            if not url.startswith(("http://", "https://")):
                raise InvalidInput("endpoint", url, "a base URL such as http://127.0.0.1:8000")
            out.append(url.rstrip("/"))
        return out

    @field_validator("concurrency", "probe_steps")
    @classmethod
    def _positive(cls, value: list[int]) -> list[int]:
        for v in value:
            if v < 1 or v > 4096:
                raise InvalidInput("concurrency/probe_steps", v, "integers between 1 and 4096")
        return value

    @model_validator(mode="after")
    def _bounded(self) -> BenchmarkSpec:
        what = "requests in one benchmark (warm-up + probes x repeats + levels x clients x repeats + arrivals)"
        at_most("planned requests", self.planned_requests, MAX_PLANNED_REQUESTS, what)
        check_measures(self.full, self.probe_steps, self.poisson_rate_per_hour)
        return self

    @property
    def resumes(self) -> bool:
        """A preempted attempt of it goes on for the rest (a closed-loop run at one level, no probes, no arrivals)."""
        return self.full and not self.probe_steps and not self.poisson_rate_per_hour and len(self.concurrency) == 1

    def remainder(self, answered: int) -> BenchmarkSpec:
        """The spec of the attempt that goes on after the node under this benchmark was taken back, `answered` of
        its full requests answered before (kept as evidence): a closed-loop run at one level without probes asks
        only for the rest (at least a round of its clients), with its warm-up again on the fresh node; any other
        shape is measured again whole (its probes' repeats and its levels are one design)."""
        if not self.resumes:
            return self
        clients = self.concurrency[0]
        left = max(clients, clients * self.repeats - max(0, answered))
        return self.model_copy(update={"repeats": math.ceil(left / clients)})

    @property
    def planned_requests(self) -> int:
        levels = sum(c * self.repeats for c in self.concurrency) if self.full else 0
        poisson = self.poisson_requests if self.poisson_rate_per_hour else 0
        return self.warmup * len(self.endpoints) + len(self.probe_steps) * self.repeats + levels + poisson


class BenchmarkStatus(BaseModel):
    """A benchmark job as any process sees it in the Store."""

    id: str
    status: str = Field(description="running | completed | failed | cancelled")
    progress: float = 0.0
    message: str = ""
    started_at: float
    finished_at: float | None = None
    samples_done: int = 0
    deployment_id: str | None = None
    run_id: str | None = None
    result: BenchmarkResult | None = Field(default=None, description="final, or partial from the stored samples")
    error: str | None = None
