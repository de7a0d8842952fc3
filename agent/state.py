"""The tuning run's state, as LangGraph checkpoints it after every step.

Values are the words themselves (Goal, TuneOptions, SearchState, Decision, ...), so a node reads
`state["goal"].workload` and mypy checks it. LangGraph's JsonPlusSerializer stores a pydantic model as its
class and fields (msgpack) and rebuilds it on resume; it rebuilds only the classes it is told it may
(CHECKPOINT_SERDE below, which every saver the agent opens uses: agent/checkpoints.py). What leaves the graph
for people or other processes (the run's record, the approval question, MCP arguments) is JSON, dumped where it
leaves; JSON that enters it (Studio's input form, MCP tool results) becomes words where it enters (read_goal,
agent/steps.py).
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, NotRequired, Required

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from pydantic import BaseModel, Field

# typing_extensions' TypedDict, not typing's: on Python 3.11 pydantic (and so LangGraph's /schemas, which
# Studio's forms are built from) cannot read typing.TypedDict and the input/output schemas come out null.
from typing_extensions import TypedDict

from worldtune.agent.configuration import TuneOptions
from worldtune.policies.search import Action, Candidate, Decision, Measurement, SearchState
from worldtune.tools.words.goal import Goal
from worldtune.tools.words.profile import Profile
from worldtune.tools.words.run_summary import RunSummary
from worldtune.tools.words.tuning import SpendEstimate


def merge_deployments(current: dict[str, str], update: dict[str, str]) -> dict[str, str]:
    """Parallel verifications add their deployments; an empty id removes a torn-down one."""
    merged = dict(current or {})
    for key, deployment_id in (update or {}).items():
        if deployment_id:
            merged[key] = deployment_id
        else:
            merged.pop(key, None)
    return merged


class Outcome(BaseModel):
    """What one `verify` branch produced: the measurement (for a failed action: only its key, kind and spend),
    the deployment it measured on and the GPU seconds charged, or why it failed."""

    measurement: Measurement
    deployment_id: str = Field(default="", description="the deployment measured on ('' for a failed action)")
    model_s: float = Field(default=0.0, description="GPU seconds charged: the deployment's start and busy time")
    wall_s: float | None = Field(default=None, description="its time to answer, when not model_s (lanes overlap)")
    failed: bool = False
    error: str = Field(default="", description="why the action failed")
    removed: bool = Field(default=False, description="the failed action tore its deployment down")
    round: int = Field(default=-1, description="the search iteration whose decision asked for it (-1: not known)")
    alongside: bool = Field(
        default=False,
        description="a probe on a node launched for the claim's run, at once with its round's first (Action.rides): "
        "within that round's time, not after it",
    )

    @property
    def key(self) -> str:
        return self.measurement.key

    def as_json(self) -> dict[str, Any]:
        """One entry of the record's `measurements`: the measurement's fields and the agent's, as always written."""
        out = self.measurement.model_dump(mode="json")
        if self.failed:
            return out | {"failed": True, "error": self.error, "removed": self.removed}
        lanes = {"wall_s": self.wall_s} if self.wall_s is not None else {}  # a run over lanes: its slowest lane
        return out | {"deployment_id": self.deployment_id, "model_s": self.model_s} | lanes

    @property
    def answer_s(self) -> float:
        """What it adds to the time to a verified answer: the slowest lane's seconds, else its GPU seconds."""
        return self.model_s if self.wall_s is None else self.wall_s


def answer_seconds(results: list[Outcome], parallel: int) -> float:
    """The time to a verified answer so far: round after round, each as long as its slowest verification (they
    run at once on their own deployments), or its verifications' seconds spread evenly over `parallel`
    deployments when the round asked for more than that (a probe alongside, on a node of its own launched for the
    claim's run, is not one of them); outcomes of no known round count one after another."""
    rounds: dict[int, list[Outcome]] = {}
    serial = 0.0
    for r in results:
        if r.round < 0:
            serial += r.answer_s / parallel
        else:
            rounds.setdefault(r.round, []).append(r)
    return serial + sum(
        max(max(r.answer_s for r in rs), sum(r.answer_s for r in rs if not r.alongside) / parallel)
        for rs in rounds.values()
    )


class TuneState(TypedDict, total=False):
    """One tuning run. Each field says which node writes it."""

    run_id: str
    """The run's id, also the checkpoint thread id (runner, or read_goal from the thread)."""
    goal_text: str
    """The goal as the user wrote it (runner, Studio's input)."""
    goal: Goal
    """The parsed Goal, confirmed by the user or by --yes (runner, or read_goal)."""
    goal_source: str
    """'parser' or 'llm:<model>' (runner, or read_goal)."""
    options: TuneOptions
    """Infra, engine, time scale, budget, parallelism (runner or read_goal; prepare sets the lanes)."""
    search: SearchState
    """Everything the search knows: offers, beliefs, measurements, spend (prepare, learn)."""
    initial_beliefs: dict[str, Profile]
    """GPU -> the profile the run started with, for 'predicted' figures (prepare)."""
    spend_estimate: SpendEstimate
    """What the search expects to spend, shown before approval (prepare)."""
    approved: bool
    """Whether the spend was approved (approve)."""
    decision: Decision
    """The search's next actions or why to stop (decide)."""
    deployments: Annotated[dict[str, str], merge_deployments]
    """Candidate key -> live deployment id (verify adds; decide, learn and finish remove)."""
    spare_lanes: Annotated[dict[str, str], merge_deployments]
    """Deployment id -> candidate key (offer|plan) of the nodes launched with a probe for the claim's run after it,
    up and not yet used (verify adds; the full run on their offer uses them; decide and finish remove)."""
    results: Annotated[list[Outcome], operator.add]
    """Measurements and failed actions as verify produced them, in completion order (verify)."""
    learned: int
    """How many of `results` the search has folded in (prepare, learn)."""
    events: Annotated[list[str], operator.add]
    """A readable log of what the agent did and why (every node)."""
    stop_reason: str
    """Why the search stopped (decide, approve)."""
    stop_kind: str
    """converged | budget | iteration_cap | infeasible | declined (decide, approve)."""
    summary: RunSummary
    """The final record as written to the database (its JSON: `summary.record()`): recommendation, measured vs
    predicted, spend (finish)."""


class TuneInput(TypedDict):
    """What starts a run: the goal in words (Studio's input form); the runner also passes the rest, parsed.

    From Studio the values arrive as JSON; read_goal turns them into the words."""

    goal_text: Required[str]
    """The goal in plain words, e.g. 'Cosmos3-Super, p95 under 150 s, cheapest per clip, H200, budget $100'."""
    options: NotRequired[TuneOptions]
    """Infra, engine, time_scale, budget_usd, ... (runner); unset: the local twin, free, no approval."""
    run_id: NotRequired[str]
    """The run's id (runner); unset: the thread id."""
    goal: NotRequired[Goal]
    """The parsed Goal (runner); unset: read_goal parses goal_text."""
    goal_source: NotRequired[str]
    """'parser' or 'llm:<model>' (runner)."""
    results: NotRequired[list[Outcome]]
    """Empty at the start (runner)."""
    events: NotRequired[list[str]]
    """The first event line (runner)."""


class TuneOutput(TypedDict, total=False):
    """What a finished run answers (Studio's output view): the record and the log."""

    run_id: str
    """The run's id (runner, or read_goal)."""
    summary: RunSummary
    """Recommendation, measured vs predicted figures with what is simulated and assumed, spend (finish)."""
    stop_reason: str
    """Why the search stopped (decide, approve)."""
    stop_kind: str
    """converged | budget | iteration_cap | infeasible | declined (decide, approve)."""
    spend_estimate: SpendEstimate
    """What the search expected to spend (prepare)."""
    events: list[str]
    """What the agent did and why (every node)."""


class VerifyTask(TypedDict):
    """What one `verify` branch gets through Send: one action on one candidate (next_actions writes it)."""

    run_id: str
    """The run's id."""
    goal: Goal
    """The run's goal: the workload to measure."""
    options: TuneOptions
    """The run's options: infra, engine, time scale, lease."""
    action: Action
    """What the search asks for: a probe or a full run, its expected cost."""
    candidate: Candidate
    """The candidate to verify: offer, plan, predictions."""
    deployment_id: str | None
    """The candidate's live deployment (or a held node on its offer to replan), if any."""
    cap_usd: float
    """This action's share of the budget, USD."""
    iteration: int
    """The search's iteration."""
    used_benchmarks: NotRequired[list[str]]
    """Benchmarks the run's results already hold: never reused as a new measurement."""
    billed_deployments: NotRequired[list[str]]
    """Deployments whose start a recorded result already billed."""
    spare_lanes: NotRequired[dict[str, str]]
    """The run's spare nodes (deployment id -> offer|plan) a full run on their offer deals its lanes to first."""


CHECKPOINT_WORDS: tuple[type[BaseModel], ...] = (
    Goal,
    TuneOptions,
    SearchState,
    Decision,
    Action,
    Candidate,
    Profile,
    SpendEstimate,
    Outcome,
    RunSummary,
)
"""Every model that is a state value, an element of one, or a value of a VerifyTask (nested models are stored
as their fields, rebuilt by the outer model's validation)."""

CHECKPOINT_SERDE = JsonPlusSerializer(allowed_msgpack_modules=CHECKPOINT_WORDS)
"""The checkpoints' serializer: rebuilds exactly these words (no 'unregistered type' warning, nothing else
revived); every saver the agent opens uses it (agent/checkpoints.py)."""
