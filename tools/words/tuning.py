"""The tuning agent as the MCP tools see it: a Tuner handed to the server, never an import of agent/.


Dependencies point one way (agent -> tools), yet the server offers start_tuning, get_tuning and
approve_tuning. Whoever builds the server and knows the agent (`worldtune mcp`, the agent's own
in-process client) passes a Tuner; a server built without one refuses those three tools. The record of a
run (opened before it starts, its failure, where it stands) is kept by the tuning-jobs capability
(tools/runs/tuning_jobs.py): the Tuner only parses goals, runs the graph and says what its checkpoints hold.

A run started over MCP belongs to the session that started it: when the session ends, the server calls
`session_ended` and the run stops and tears down what it started, unless it was started with
detach=true; a detached run goes on in a process of its own, and if that process dies, `worldtune gc`
tears down what it left (the run's heartbeat stops).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from worldtune.tools.words.limits import MAX_BUDGET_USD


class TuningRequest(BaseModel):
    """What start_tuning passes on besides the goal text (checked by the MCP tool's schema first)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    infra: str
    engine: str
    twin_profile: str | list[str] | None
    time_scale: float = Field(gt=0)
    budget_usd: float | None = Field(gt=0, le=MAX_BUDGET_USD)
    confidence: float | None = Field(default=None, gt=0, lt=1, description="overrides the goal's confidence")
    max_iterations: int = Field(ge=1)
    yes: bool = Field(description="the spend is approved up front")
    db_path: str | None
    detach: bool = Field(default=False, description="the run outlives the MCP session that started it")


class TuningJob(BaseModel):
    """A run the Tuner has prepared (its goal read and checked) and not started yet: what is recorded."""

    model_config = ConfigDict(extra="forbid")

    run_id: str = Field(description="the run's id (its checkpoint thread id)")
    goal: dict[str, Any] = Field(description="the goal the run works to, as the Goal model writes it")


Failed = Callable[[str], None]  # records the error that ended a run driven in this process


class Tuner(Protocol):
    """Prepares, runs, follows and resumes tuning runs; tools/runs/tuning_jobs.py records them."""

    def prepare(self, goal: str, request: TuningRequest) -> TuningJob:
        """Read the goal (an ambiguous one raises) and check the request; nothing is recorded or started."""
        ...

    def launch(self, job: TuningJob, request: TuningRequest, failed: Failed) -> None:
        """Start the prepared run: in this process (`failed` records an error that ends it), or with
        request.detach in a process of its own, which takes the run over and records its own failure."""
        ...

    def progress(self, run_id: str, db_path: str) -> dict[str, Any]:
        """What the run's driver knows beyond its record: `alive` (a thread of this process drives it), `error`,
        and from its checkpoint the events, spend, measurements, stop reason, spend estimate and whether it
        waits for approval (TuningStatus's fields); `note` when the checkpoint cannot be read now."""
        ...

    def resume(self, run_id: str, approve: bool, db_path: str | None, failed: Failed) -> None:
        """Answer a run's approval question; it continues (approve) or stops."""
        ...

    def stop_run(self, run_id: str, reason: str) -> bool:
        """Stop one run driven in this process at its next safe point and wait for its teardown; False when no
        thread of this process drives it (tools/runs/run_heartbeat.py abandons runs whose client is gone)."""
        ...

    def write_report(self, run_id: str, db_path: str) -> dict[str, str]:
        """Draw a completed run's report (HTML, plots, record, deployment YAML) from the database at `db_path`
        into its default folder on this machine; returns name -> path (the agent draws it: tools never import it)."""
        ...

    def session_ended(self) -> list[str]:
        """The session ended: stop its runs (each tears down what it started) and wait for that; detached
        runs are processes of their own and go on. Returns the ids stopped."""
        ...


class SpendForecast(BaseModel):
    """What the search will likely cost and take: searches simulated against the belief (search/forecast.py)."""

    usd: float = Field(description="median spend, USD")
    usd_max: float = Field(description="the dearest simulated search, USD")
    gpu_hours: float
    answer_hours: float = Field(description="median hours from approval to a verified answer")
    answer_hours_max: float
    measurements: float = Field(description="median measurements (probes + full runs)")
    runs: int = Field(description="searches simulated")
    stops: dict[str, int] = Field(description="how the simulated searches stopped")
    basis: str


class SpendEstimate(BaseModel):
    """What the search may commit and will likely spend, shown before approval (prepare writes it).

    Its JSON is what the run's record, the approval question and get_tuning carry (the agent's prepare node writes
    it; tools/mcp_tuning's TuningStatus answers it): `parallel_why` appears only when a deadline bought lanes.
    """

    parallel: int = Field(description="verification lanes (a deadline may buy more than --parallel)")
    usd: float = Field(description="the bound: what the search may commit, USD (policies/search/nodes.py)")
    gpu_hours: float
    answer_hours: float = Field(description="modelled hours from approval to a verified answer")
    deployments: int = Field(description="nodes provisioned")
    cold_loads: int
    warm_loads: int
    estimate_basis: str
    budget_usd: float | None = Field(description="the goal's hard budget")
    candidates: int = Field(description="candidates ranked")
    feasible: int = Field(description="candidates predicted to meet the goal")
    first_to_verify: list[str] = Field(description="the candidates it would measure first")
    engine: str
    infra: str
    priced_as: str
    parallel_why: str | None = Field(default=None, description="why a deadline bought lanes, or could not")
    confidence: float = Field(default=0.95, description="the one level of the latency claim and the stopping rule")
    claim_requests: int = Field(default=0, description="requests the claim needs at that confidence (order statistics)")
    claim_lanes: int = Field(default=1, description="deployments the likeliest optimum's full run is dealt over")
    claim_lanes_why: str = Field(default="", description="why that many lanes (policies/search/lanes.py)")
    forecast: SpendForecast

    @model_serializer(mode="wrap")
    def _without_empty_why(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        if out.get("parallel_why") is None:
            out.pop("parallel_why", None)
        return out

    def as_json(self) -> dict[str, Any]:
        """The estimate as the record, the approval question and MCP carry it."""
        return self.model_dump(mode="json")
