"""A tuning run's summary as words: what its record holds once it ends (issue 38).

The agent builds a RunSummary when the run finishes (agent/record.py), the record in the results database keeps
its JSON (`RunSummary.record()`: only the fields the run set, so a run that never searched has no `rejected`), and
whoever shows a run reads it back with `RunSummary.model_validate(record)`: the CLI's printer, the report, the MCP
get_tuning answer. Fields other code adds to a record later (the fleet, an abandoned run's reason) are kept as
they are (extra fields allowed). A field that only some runs have (a measured figure's claim, what a search
rejected) is left out of the JSON while it is None, however the words were made (a checkpoint rebuilds them from
every field), so a record reads as it always has.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from worldtune.tools.words.goal import Goal
from worldtune.tools.words.offer import Offer
from worldtune.tools.words.plan import PlanField


class Figures(BaseModel):
    """The recommendation's figures, measured or predicted. A measured percentile only as tools/words/stats
    claims it (order statistics when n allows, else null), with a named parametric bound beside it (an extra
    field, e.g. `latency_p95_upper_normal`) and its assumption."""

    model_config = ConfigDict(extra="allow")

    latency_p50_s: float | None = None
    latency_p95_s: float | None = None
    clips_per_hour_per_node: float | None = None
    usd_per_clip: float | None = None
    latency_p95_claim: str | None = Field(default=None, description="claimable (order statistics), or why not")
    claim_confidence: float | None = None
    parametric_assumption: str | None = None
    samples: int | None = Field(default=None, description="the measured latencies the figures rest on")

    @model_serializer(mode="wrap")
    def _only_what_was_measured(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_none(
            handler(self), ("latency_p95_claim", "claim_confidence", "parametric_assumption", "samples")
        )

    def figure(self, name: str) -> Any:
        """A figure by its name, a field or an extra one (None if the record has none)."""
        if name in type(self).model_fields:
            return getattr(self, name)
        return (self.model_extra or {}).get(name)

    def bounds(self) -> dict[str, float]:
        """The named parametric bounds (extra fields ending in `_normal`)."""
        return {k: float(v) for k, v in (self.model_extra or {}).items() if k.endswith("_normal")}


class Spend(BaseModel):
    """What the search spent: GPU-hours, dollars, deployments, plan changes in place, benchmarks, time to answer."""

    gpu_hours: float
    usd: float
    budget_usd: float | None
    deployments: int
    replans: int
    benchmarks: int
    model_seconds: float
    answer_hours: float = Field(description="time to a verified answer on real infra (modelled on the twin)")
    lanes: int = Field(description="the most lanes a full run took")
    full_requests: int
    confidence: float
    answer_basis: str
    priced_as: str


class Recommendation(BaseModel):
    """The plan the run recommends, on which offer and capacity."""

    key: str
    gpu: str
    plan: PlanField
    replicas: int
    replicas_per_node: int
    nodes: int
    capacity: str
    offer: str
    usd_per_hour: float
    offer_detail: Offer = Field(description="the offer as listed")


class CandidateRow(BaseModel):
    """One candidate as the run believes it now, beside what it predicted before measuring."""

    key: str
    gpu: str
    plan: PlanField
    offer: str
    capacity: str
    usd_per_hour: float
    nodes: int
    stage: str
    feasible: bool
    latency_s: float
    latency_q_s: float
    clips_per_hour_per_node: float
    usd_per_clip: float
    predicted_latency_s: float | None
    predicted_usd_per_clip: float | None
    predicted_clips_per_hour_per_node: float | None


class RecordedGoal(Goal):
    """The goal as a run's record keeps it: its fields, the words it was read from and its description."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True, serialize_by_alias=True)

    confidence: float = Field(
        default=0.99, allow_inf_nan=False, description="a record written before goals had a confidence claimed at 99%"
    )
    text: str = Field(default="", description="the goal as the user wrote it")
    description: str = Field(default="", alias="describe", description="the goal as worldtune read it")


class RunOptions(BaseModel):
    """The options a run was started with, as recorded (agent/configuration.TuneOptions' JSON): the ones the
    record's readers use by name, the rest kept as they are."""

    model_config = ConfigDict(extra="allow")

    engine: str = "twin"
    infra: str = "local"
    time_scale: float | None = None
    twin_profile: str | list[str] | None = Field(default=None, description="a file or folder, or several")


class LatencyClaim(BaseModel):
    """How far the measured latency goes at the goal's confidence: the tolerance bound always, the empirical
    percentile only with enough samples."""

    percentile: int
    samples: int
    samples_needed_for_empirical: int
    confidence: float
    claim: str | None = Field(default=None, description="the parametric bound, when the record has one")
    empirical: str

    @model_serializer(mode="wrap")
    def _claim_when_bounded(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_none(handler(self), ("claim",))


class Provenance(BaseModel):
    """Where each figure of a run's record comes from: simulated or measured, predicted, assumed; how far the
    latency claim goes; how prices are dated (agent/provenance.py says it)."""

    engine: Literal["twin", "vllm-omni"]
    simulated: bool
    measured_figures: str
    twin_profile: str | list[str] | None
    time_scale: float | None
    predicted_figures: str
    assumed_terms: list[str]
    assumed_spread: str
    prices: str
    latency: LatencyClaim
    spend: str
    artifacts: str


class RunSummary(BaseModel):
    """A finished run's record: goal, recommendation, measured against predicted, spend, stop, every candidate."""

    model_config = ConfigDict(extra="allow")

    run_id: str
    thread_id: str
    goal: RecordedGoal
    goal_source: str = "parser"
    options: RunOptions = Field(default_factory=RunOptions)
    stop_reason: str = "stopped"
    stop_kind: str = ""
    recommendation: Recommendation | None = None
    measured: Figures = Field(default_factory=Figures)
    predicted: Figures = Field(default_factory=Figures)
    spend: Spend
    spend_estimate: dict[str, Any] | None = None
    decision: dict[str, Any] | None = None
    events: list[str] = Field(default_factory=list)
    measurements: list[dict[str, Any]] = Field(default_factory=list)
    candidates: list[CandidateRow] = Field(default_factory=list)
    rejected: list[dict[str, Any]] | None = Field(default=None, description="set once the run searched")
    failed: dict[str, str] | None = Field(default=None, description="set once the run searched")
    nearest: list[dict[str, Any]] | None = Field(default=None, description="set once the run searched")
    learned_profiles: dict[str, dict[str, Any]] | None = Field(default=None, description="per GPU type")
    provenance: Provenance | None = Field(default=None, description="what is simulated, measured, assumed")
    fleet: dict[str, Any] | None = Field(default=None, description="the fleet for the goal's traffic, once planned")

    @model_serializer(mode="wrap")
    def _only_what_was_searched(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        optional = ("rejected", "failed", "nearest", "learned_profiles", "provenance", "fleet")
        return _without_none(handler(self), optional)

    def record(self) -> dict[str, Any]:
        """The record's JSON (and any fields added to the record)."""
        return self.model_dump(mode="json")


class RunOutcome(BaseModel):
    """What driving a run ends with (agent/runner.py's tune and resume, read by the command line): the summary of a
    completed run, or the approval question of one that waits; the CLI's fleet step adds the fleet for the goal's
    traffic."""

    run_id: str
    status: Literal["completed", "waiting_for_approval"]
    question: dict[str, Any] | None = Field(default=None, description="the approval question (its spend estimate)")
    summary: RunSummary | None = Field(default=None, description="set once completed")
    fleet: dict[str, Any] | None = Field(default=None, description="the capacity plan and its rehearsal, as JSON")

    @property
    def thread_id(self) -> str:
        """The LangGraph thread the run is checkpointed under: the run's id."""
        return self.run_id


def _without_none(data: dict[str, Any], optional: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if not (k in optional and v is None)}
