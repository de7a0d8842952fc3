"""The tuning run's state, as LangGraph checkpoints it after every step.

Values are plain JSON data (pydantic models dumped with mode="json"): a checkpoint stays readable
with any tool and resumes in a new process without registering types for the serializer. Nodes turn
them back into the words (Goal, SearchState, Decision) with `model_validate`.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict


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
