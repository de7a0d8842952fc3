"""Sample: one measured request of a benchmark, as the request loop records it and the Store keeps it.

Every sample is written the moment its request ends (tools/bench/runner.py), one row per (benchmark, seq) whose
JSON body is `Sample.record()`: the fields the loop set, and nothing else, so the database format is the one the
loop always wrote. `Store.samples()` returns Samples; the Result (tools/results/compute.py), the backends that
copy samples from a cluster (sky/bench_remote.py) and the MCP tool get_result read them by attribute.

Clocks and units. Model seconds are the profile's time: against a real server they are wall seconds; against a
twin at time scale K they are wall seconds x K (the twin's X-Twin-Time-Scale). What each field measures:
- measured by the client: `sent_at` (unix wall time), `wall_latency_s`, the status, the checked clip's
  `video_*` facts; `latency_s`, `sent_at_model` and `done_at_model` are the client's wall clock x K;
- reported by the server: `server_time_s`, `stage_durations`, `peak_memory_mb`, `request_id`; against a twin
  these are simulated (the profile's timings, seeded noise), not measured;
- `server_done_at_s` and `twin_client_s` only a twin reports (X-Twin-Done-At, X-Twin-Client-Time-S): its engine's
  model clock, simulated.
Unknown keys (a future field, a cluster's own tag) are kept as they are and written back unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Sample(BaseModel):
    """One request: what was sent, what came back, and when (see the module's docstring for the clocks)."""

    model_config = ConfigDict(extra="allow")

    # ---- what was sent (the request loop) -------------------------------------------------------------------
    seq: int = Field(default=0, description="order in the benchmark (a later attempt numbers after the earlier)")
    phase: str = Field(default="full", description="warmup | probe | full (closed loop) | poisson (open loop)")
    steps: int = Field(default=0, description="denoising steps of this request")
    concurrency: int = Field(default=1, description="closed-loop clients of its level; 0 for open-loop arrivals")
    endpoint: str = Field(default="", description="base URL of the replica it went to")
    rate_per_hour: float | None = Field(default=None, description="open-loop arrival rate (poisson phase only)")
    arrival_model_s: float | None = Field(
        default=None,
        description="poisson phase: its arrival in the seeded schedule, model s from the phase's start; a busy "
        "client sends it late (sent_at_model says when it went), never early",
    )
    video_seconds: float = Field(default=0.0, description="seconds of video the request asks for")
    attempt: int | None = Field(default=None, description="attempt of a benchmark relaunched after a preemption")
    queue_ahead: int | None = Field(default=None, description="our requests in flight to its endpoint when sent")
    client_timeout_s: float | None = Field(default=None, description="the client's timeout, model seconds")
    sent_at: float | None = Field(default=None, description="unix time it was sent (wall, measured)")
    sent_at_model: float = Field(default=0.0, description="send time on the benchmark's clock: wall x K, model s")

    # ---- what came back: measured by the client ---------------------------------------------------------------
    ok: bool = Field(default=False, description="answered 200 with a clip that passed the checks")
    status_code: int | None = Field(default=None, description="HTTP status of the answer (None: no answer)")
    error_kind: str | None = Field(default=None, description="client_timeout, server_timeout, bad_video, ...")
    detail: str | None = Field(default=None, description="the error's message")
    wall_latency_s: float | None = Field(default=None, description="send to answer, wall seconds (measured)")
    latency_s: float | None = Field(default=None, description="send to answer, model seconds: wall x K")
    done_at_model: float | None = Field(default=None, description="answer time on the benchmark's clock, model s")
    video_frames: int | None = Field(default=None, description="frames of the returned MP4 (checked)")
    video_width: int | None = None
    video_height: int | None = None
    video_fps: float | None = None
    video_bytes: int | None = None
    interrupted: bool = Field(default=False, description="its attempt was cut short (a preemption); kept")
    cluster: str | None = Field(default=None, description="the cluster it was measured on, next to the server")
    remote_seq: int | None = Field(default=None, description="its seq in that cluster's own database")

    # ---- what came back: reported by the server (simulated by a twin) ----------------------------------------
    request_id: str | None = Field(default=None, description="the server's id (X-Request-Id, or the job id)")
    served_model: str | None = Field(
        default=None, description="the model the server says it served (X-Model, or the job's `model`)"
    )
    server_time_s: float | None = Field(
        default=None, description="the server's inference time incl. its queue (X-Inference-Time-S), model s"
    )
    peak_memory_mb: float | None = Field(default=None, description="the server's peak GPU memory (X-Peak-Memory-MB)")
    stage_durations: dict[str, Any] = Field(
        default_factory=dict, description="pipeline stage -> seconds (X-Stage-Durations; profiler on only)"
    )
    server_done_at_s: float | None = Field(
        default=None, description="the twin's engine clock when the answer was done (X-Twin-Done-At), simulated"
    )
    twin_client_s: float | None = Field(
        default=None,
        description="the client's end-to-end model seconds on the twin's clock (X-Twin-Client-Time-S): queue, server "
        "time and the part outside the engine, simulated",
    )

    def server_time(self) -> float | None:
        """This answer's seconds on the server's clock when the server reports it (X-Inference-Time-S: what the
        affine fit of a probe uses), else the client's latency."""
        return self.server_time_s if self.server_time_s is not None else self.latency_s

    def counts(self) -> bool:
        """Whether it is a request of its benchmark's count: answered, or of an attempt no preemption cut (the one
        cut in flight was asked again on the relaunched node: BenchmarkSpec.remainder)."""
        return self.ok or not self.interrupted

    def client_time(self) -> float | None:
        """A client's end-to-end seconds of this answer, the clock goals are judged on: the twin's model clock when
        it reports one (X-Twin-Client-Time-S: free of a loaded machine's jitter), else the client's wall time x the
        time scale (a real server)."""
        return self.twin_client_s if self.twin_client_s is not None else self.latency_s

    @classmethod
    def of(cls, value: Sample | Mapping[str, Any]) -> Sample:
        """A Sample as it is, or one read from its stored form (a dict of its fields)."""
        return value if isinstance(value, Sample) else cls.model_validate(dict(value))

    @classmethod
    def from_json(cls, body: str, **changes: Any) -> Sample:
        """A stored body (JSON), with `changes` set on it."""
        return cls.of({**json.loads(body), **changes})

    def record(self) -> dict[str, Any]:
        """The stored form: the fields that were set (and any unknown keys), as the loop always wrote them."""
        return self.model_dump(exclude_unset=True)
