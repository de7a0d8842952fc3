"""The tuning run's state, as LangGraph checkpoints it after every step.

Values are plain JSON data (pydantic models dumped with mode="json"): a checkpoint stays readable
with any tool and resumes in a new process without registering types for the serializer. Nodes turn
them back into the words (Goal, SearchState, Decision) with `model_validate`.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, NotRequired, Required

# typing_extensions' TypedDict, not typing's: on Python 3.11 pydantic (and so LangGraph's /schemas, which
# Studio's forms are built from) cannot read typing.TypedDict and the input/output schemas come out null.
from typing_extensions import TypedDict


def merge_deployments(current: dict[str, str], update: dict[str, str]) -> dict[str, str]:
    """Parallel verifications add their deployments; an empty id removes a torn-down one."""
    merged = dict(current or {})
    for key, deployment_id in (update or {}).items():
        if deployment_id:
            merged[key] = deployment_id
        else:
            merged.pop(key, None)
    return merged


class TuneState(TypedDict, total=False):
    """One tuning run. Each field says which node writes it."""

    run_id: str
    """The run's id, also the checkpoint thread id (runner, at start)."""
    goal_text: str
    """The goal as the user wrote it (runner)."""
    goal: dict[str, Any]
    """The parsed Goal, confirmed by the user or by --yes (runner)."""
    goal_source: str
    """'parser' or 'llm:<model>' (runner)."""
    options: dict[str, Any]
    """TuneOptions: infra, engine, time scale, budget, parallelism (runner)."""
    search: dict[str, Any]
    """policies.search.SearchState: offers, beliefs, measurements, spend (prepare, learn)."""
    initial_beliefs: dict[str, Any]
    """GPU -> the profile the run started with, for 'predicted' figures (prepare)."""
    spend_estimate: dict[str, Any]
    """What the search expects to spend, shown before approval (prepare)."""
    approved: bool
    """Whether the spend was approved (approve)."""
    decision: dict[str, Any]
    """policies.search.Decision: the next actions or why to stop (decide)."""
    deployments: Annotated[dict[str, str], merge_deployments]
    """Candidate key -> live deployment id (verify adds, decide removes)."""
    results: Annotated[list[dict[str, Any]], operator.add]
    """Measurements as verify produced them, in completion order (verify)."""
    learned: int
    """How many of `results` the search has folded in (learn)."""
    events: Annotated[list[str], operator.add]
    """A readable log of what the agent did and why (every node)."""
    stop_reason: str
    """Why the search stopped (decide, approve)."""
    stop_kind: str
    """converged | budget | iteration_cap | infeasible | declined (decide, approve)."""
    summary: dict[str, Any]
    """The final record: recommendation, measured vs predicted, spend (finish)."""


class TuneInput(TypedDict):
    """What starts a run: the goal in words (Studio's input form); the runner also passes the rest, parsed."""

    goal_text: Required[str]
    """The goal in plain words, e.g. 'Cosmos3-Super, p95 under 150 s, cheapest per clip, H200, budget $100'."""
    options: NotRequired[dict[str, Any]]
    """TuneOptions fields (infra, engine, time_scale, budget_usd, ...); unset: the local twin, free, no approval."""
    run_id: NotRequired[str]
    """The run's id (runner); unset: the thread id."""
    goal: NotRequired[dict[str, Any]]
    """The parsed Goal (runner); unset: read_goal parses goal_text."""
    goal_source: NotRequired[str]
    """'parser' or 'llm:<model>' (runner)."""
    results: NotRequired[list[dict[str, Any]]]
    """Empty at the start (runner)."""
    events: NotRequired[list[str]]
    """The first event line (runner)."""


class TuneOutput(TypedDict, total=False):
    """What a finished run answers (Studio's output view): the record and the log."""

    run_id: str
    summary: dict[str, Any]
    """Recommendation, measured vs predicted figures with what is simulated and assumed, spend (finish)."""
    stop_reason: str
    stop_kind: str
    spend_estimate: dict[str, Any]
    events: list[str]


class VerifyTask(TypedDict):
    """What one `verify` branch gets through Send: one action on one candidate."""

    run_id: str
    goal: dict[str, Any]
    options: dict[str, Any]
    action: dict[str, Any]
    candidate: dict[str, Any]
    deployment_id: str | None
    cap_usd: float
    iteration: int
    used_benchmarks: NotRequired[list[str]]
    """Benchmarks the run's results already hold: never reused as a new measurement (next_actions)."""
    billed_deployments: NotRequired[list[str]]
    """Deployments whose start a recorded result already billed (next_actions)."""
