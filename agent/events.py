"""What a run says as it goes, as words (issue 38 item 4): one model per event kind, each with the line a person
reads. The graph's nodes and the runner say them (`tell`); LangGraph's stream (stream_mode 'custom') carries
them as {"event": kind, ...fields}; `worldtune tune` prints each one's `line()` (its printer is generated from
these words, as vLLM's benchmark prints from its metrics). `Events` is the one sink every part of a run says
them to; the deploy and benchmark code's progress (a message and a fraction) is tools/words/deployment.py's
`Progress`, another thing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError
from rich.markup import escape

from worldtune.tools.words.run_summary import Recommendation
from worldtune.tools.words.tuning import SpendEstimate

Events = Callable[[str, dict[str, Any]], None]  # (event kind, its fields as JSON): what a run says, to a person


class RunEvent(BaseModel):
    """One thing a run says: its kind (`event`), its fields, and the line `worldtune tune` prints (None: none)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    event: ClassVar[str] = ""
    shown: ClassVar[bool] = False  # printed as a dim "kind field value, ..." line (what it does, not a finding)

    def fields(self) -> dict[str, Any]:
        """The event's fields as JSON, those not set left out (the stream's and the sink's form)."""
        return self.model_dump(mode="json", exclude_none=True)

    def line(self) -> str | None:
        if not self.shown:
            return None
        return f"  [dim]{self.event} {escape(', '.join(f'{k} {v}' for k, v in self.fields().items()))}[/]"


EVENTS: dict[str, type[RunEvent]] = {}


def _kind(cls: type[RunEvent]) -> type[RunEvent]:
    EVENTS[cls.event] = cls
    return cls


def tell(events: Events, event: RunEvent) -> None:
    """Say `event` to a sink."""
    events(event.event, event.fields())


def read_event(kind: str, data: dict[str, Any]) -> RunEvent | None:
    """The word a sink was told (None for a kind this version does not know, or fields it cannot read)."""
    word = EVENTS.get(kind)
    if word is None:
        return None
    try:
        return word.model_validate(data)
    except ValidationError:
        return None


# ---- what the run believes and decides ------------------------------------------------------------------
@_kind
class GoalRead(RunEvent):
    event: ClassVar[str] = "goal"
    goal: str
    run_id: str
    assumptions: list[str] = []

    def line(self) -> str:
        notes = "".join(f"\n  [yellow]assumed[/] {escape(note)}" for note in self.assumptions)
        return f"[bold]goal[/] {escape(self.goal)}  [dim](run {self.run_id})[/]{notes}"


@_kind
class Believed(RunEvent):
    """The candidates ranked by the prediction, and what the search may spend."""

    event: ClassVar[str] = "candidates"
    count: int
    feasible: int
    top: list[str]
    estimate: SpendEstimate

    def line(self) -> str:
        est, f = self.estimate, self.estimate.forecast
        budget = f"${est.budget_usd:g}" if est.budget_usd is not None else "no budget"
        out = [
            f"[bold]belief[/] {self.count} candidates, {self.feasible} predicted to meet the goal; best:",
            *(f"  {escape(line)}" for line in self.top),
            f"[bold]spend estimate[/] at most ${est.usd:.2f} ({est.gpu_hours:.2f} GPU-h) of {budget}, priced as "
            f"{escape(est.priced_as)}",
            f"  time to a verified answer at most ~{est.answer_hours:.2f} h (modelled), {est.deployments} node(s), "
            f"{est.cold_loads} cold + {est.warm_loads} warm load(s)",
            f"  likely ${f.usd:.2f} ({f.gpu_hours:.2f} GPU-h, {f.measurements:g} measurements) and "
            f"{f.answer_hours:.2f} h to a verified answer: simulated, the median of {f.runs} searches against truths "
            f"drawn from the belief (the dearest ${f.usd_max:.2f}, {f.answer_hours_max:.2f} h; the at-most is the "
            f"spend estimate's above)",
        ]
        if est.claim_requests:
            why = f": {escape(est.claim_lanes_why)}" if est.claim_lanes > 1 else ""
            out.append(
                f"  claim at {est.confidence * 100:g}% confidence: {est.claim_requests} requests (order "
                f"statistics), over {est.claim_lanes} lane(s){why}"
            )
        if est.parallel_why:
            out.append(f"  {escape(est.parallel_why)}")
        return "\n".join(out)


@_kind
class Next(RunEvent):
    """An action the search chose: a probe or a full run of a candidate, why, and what it is expected to cost."""

    event: ClassVar[str] = "next"
    kind: str
    key: str
    reason: str
    expected_usd: float
    value: float | None = None
    requests: int | None = None

    def line(self) -> str:
        return f"[cyan]{self.kind}[/] {escape(self.key)}: {escape(self.reason)} (~${self.expected_usd:.2f})"


@_kind
class Stopped(RunEvent):
    event: ClassVar[str] = "stop"
    reason: str
    kind: str | None = None

    def line(self) -> str:
        return f"[bold]stop[/] {escape(self.reason)}"


@_kind
class KeptNode(RunEvent):
    """A node kept for the next action of the same offer (replanned there, not started again)."""

    event: ClassVar[str] = "keep_node"
    key: str
    deployment: str


@_kind
class Learned(RunEvent):
    event: ClassVar[str] = "learned"
    gpu: str
    note: str
    spent_usd: float

    def line(self) -> str:
        return f"  [magenta]learned[/] {escape(self.note)} (spent ${self.spent_usd:.2f})"


@_kind
class Elapsed(RunEvent):
    """The time to a verified answer so far (modelled on the twin) and the measurements it took."""

    event: ClassVar[str] = "elapsed"
    answer_hours: float
    measurements: int


@_kind
class Done(RunEvent):
    event: ClassVar[str] = "done"
    stop_reason: str | None = None
    recommendation: Recommendation | None = None


@_kind
class FleetNote(RunEvent):
    event: ClassVar[str] = "fleet"
    note: str

    def line(self) -> str:
        return f"[bold]fleet[/] {escape(self.note)}"


# ---- what a verification does and finds ------------------------------------------------------------------
@_kind
class Deploying(RunEvent):
    event: ClassVar[str] = "deploy"
    shown: ClassVar[bool] = True
    key: str
    plan: str | None = None
    gpu: str | None = None
    infra: str | None = None
    lane: bool | None = None  # true: one more lane of a claim
    note: str | None = None


@_kind
class Replanning(RunEvent):
    event: ClassVar[str] = "replan"
    key: str
    deployment: str
    plan: str | None = None
    previous: str | None = None
    note: str | None = None  # why it could not be replanned


class _Benchmarking(RunEvent):
    key: str
    deployment: str
    requests: int | None = None


@_kind
class Probing(_Benchmarking):
    event: ClassVar[str] = "probe"


@_kind
class FullRun(_Benchmarking):
    event: ClassVar[str] = "full"


@_kind
class Lanes(RunEvent):
    """A claim's requests dealt over its lanes."""

    event: ClassVar[str] = "lanes"
    key: str
    lanes: int
    requests: list[int]


@_kind
class Decided(RunEvent):
    """A claim settled before its last request (on a twin, at a moment of the lanes' model clocks)."""

    event: ClassVar[str] = "decided"
    key: str
    reason: str
    at_model_s: float | None = None


@_kind
class Measured(RunEvent):
    event: ClassVar[str] = "measured"
    key: str
    kind: str
    usd: float
    model_s: float
    wall_s: float | None = None
    lanes: int | None = None
    per_step_s: float | None = None  # a probe's fit
    fixed_s: float | None = None
    p50_s: float | None = None  # a full run's
    n: int | None = None
    latencies: int | None = None  # 0: a full run with no answer

    def line(self) -> str:
        figures = ", ".join(f"{k} {v}" for k, v in self.fields().items() if k not in ("key", "kind"))
        return f"  [green]measured[/] {self.kind} {escape(self.key)}: {escape(figures)}"


@_kind
class Failed(RunEvent):
    event: ClassVar[str] = "failed"
    key: str
    error: str

    def line(self) -> str:
        return f"  [red]failed[/] {escape(self.key)}: {escape(self.error)}"


@_kind
class Rejected(RunEvent):
    """A measurement that is not evidence (failed requests, too few answers, ...), and what follows."""

    event: ClassVar[str] = "rejected"
    key: str
    reason: str
    then: str


@_kind
class Reused(RunEvent):
    event: ClassVar[str] = "reuse"
    shown: ClassVar[bool] = True
    key: str
    benchmark: str
    deployment: str


@_kind
class TornDown(RunEvent):
    event: ClassVar[str] = "teardown"
    shown: ClassVar[bool] = True
    deployment: str
    note: str | None = None


# ---- the run's own life ------------------------------------------------------------------------------------
@_kind
class Resumed(RunEvent):
    event: ClassVar[str] = "resume"
    shown: ClassVar[bool] = True
    run_id: str


@_kind
class CleanupFailed(RunEvent):
    event: ClassVar[str] = "cleanup-failed"
    shown: ClassVar[bool] = True
    error: str
    hint: str


@_kind
class RecordFailed(RunEvent):
    event: ClassVar[str] = "record-failed"
    shown: ClassVar[bool] = True
    error: str
    hint: str
