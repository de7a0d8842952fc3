"""The search: which candidate to measure next, what the measurements teach, and when to stop.

Candidates are offers x valid plans (each plan fixes the replica layout on the node) x capacity, and
the number of nodes a throughput floor needs. The belief is a posterior over the performance model's
parameters per GPU type (policies/belief.py); every candidate's prediction and its uncertainty come
from it (the parameters its plan exercises). Short-step probes give per-step and fixed time, full runs
give the latencies a percentile claim needs (tools/words/stats.py: order statistics when n allows, else the
named parametric bound). A measurement with failed requests, fewer answers than asked, or other load on
the deployment is not evidence: it is retried once on a fresh deployment, then the candidate is failed.

The next action and the stop come from posterior draws (policies/acquisition.py): converged when
P(an unverified candidate that meets the constraints beats the chosen one by more than the margin) is
below STOP_LEVEL; infeasible when P(any candidate meets the constraints) is below it (with the nearest
options); budget and iteration cap are last resorts and say so.

This module is the search's one entry, and the only part of policies/ the agent imports. Where it lives:
- policies/search_words.py: the words (Candidate, Measurement, Action, Decision, SearchState);
- policies/candidates.py: the belief about every candidate, judged against the goal and costed;
- policies/evidence.py: folding a measurement in (or rejecting it) and refitting the posterior;
- policies/draws.py: posterior draws of every candidate's objective and feasibility;
- policies/acquisition.py: the next actions or the stop, from those draws;
- policies/nodes.py: the bound on the search's cost and time to a verified answer, node by node;
- policies/forecast.py: the likely cost and time, from searches simulated against the belief.
Each of those imports candidates.py (forecast.py also acquisition and evidence), none imports this module.
"""

from __future__ import annotations

import math

from worldtune.policies import acquisition, evidence, lanes, nodes
from worldtune.policies.candidates import (
    CONFIDENCE,
    FULL_REQUESTS,
    MAX_NODES,
    OPTIMISM_Z,
    PROBE_REPEATS,
    PROBE_STEPS,
    RETRIES,
    STOP_LEVEL,
    Action,
    ActionKind,
    Assessed,
    Candidate,
    Decision,
    Measurement,
    ModeShift,
    NearestOption,
    Rejected,
    SearchState,
    StopKind,
    action_cost,
    assess,
    believed_start_s,
    best_verified,
    candidate_for,
    candidate_key,
    candidates,
    could_be_feasible,
    full_requests,
    full_seconds,
    hardware_key,
    held_offers,
    initial_state,
    objective_value,
    optimistic_value,
    probe_seconds,
    probe_sigma,
    recommendation,
    start_seconds,
    tolerance_bound,
)
from worldtune.policies.forecast import Forecast, forecast

__all__ = [
    "CONFIDENCE",
    "FULL_REQUESTS",
    "MAX_NODES",
    "OPTIMISM_Z",
    "PROBE_REPEATS",
    "PROBE_STEPS",
    "RETRIES",
    "STOP_LEVEL",
    "Action",
    "ActionKind",
    "Assessed",
    "Candidate",
    "Decision",
    "Forecast",
    "Measurement",
    "ModeShift",
    "NearestOption",
    "Rejected",
    "SearchState",
    "StopKind",
    "action_cost",
    "assess",
    "believed_start_s",
    "best_verified",
    "candidate_for",
    "candidate_key",
    "candidates",
    "claim_lanes",
    "could_be_feasible",
    "deadline_refusal",
    "decide",
    "forecast",
    "full_requests",
    "full_seconds",
    "hardware_key",
    "held_offers",
    "initial_state",
    "kept_spares",
    "lanes_for_deadline",
    "objective_value",
    "optimistic_value",
    "probe_seconds",
    "probe_sigma",
    "recalibrated",
    "recommendation",
    "record",
    "record_failure",
    "search_plan",
    "spend_estimate",
    "start_seconds",
    "tolerance_bound",
]  # fmt: skip


def record(state: SearchState, measurement: Measurement, recalibrate: bool = True) -> SearchState:
    """Fold one measurement in (or reject it) and refit the posterior (evidence.record)."""
    return evidence.record(state, measurement, recalibrate)


def recalibrated(state: SearchState, gpu: str) -> SearchState:
    """The state with `gpu`'s posterior refitted from every measurement of it (evidence.recalibrated)."""
    return evidence.recalibrated(state, gpu)


def record_failure(state: SearchState, key: str, usd: float, gpu_hours: float, reason: str = "") -> SearchState:
    """A candidate that could not be measured: its spend counted, retried once, then failed (evidence)."""
    return evidence.record_failure(state, key, usd, gpu_hours, reason)


def decide(state: SearchState, parallel: int = 1, margin: float = 0.03, max_iterations: int = 40) -> Decision:
    """The next actions (at most `parallel`), or why to stop (acquisition.decide)."""
    return acquisition.decide(state, parallel=parallel, margin=margin, max_iterations=max_iterations)


def spend_estimate(state: SearchState, parallel: int = 1) -> tuple[float, float, list[str]]:
    """Expected USD and GPU-hours of the search: a probe for every near contender, full runs for the likeliest,
    candidates on one offer sharing its node (policies/nodes.py)."""
    plan = search_plan(state, parallel, state.reuse_nodes)
    return plan.usd, plan.gpu_hours, plan.keys


def search_plan(state: SearchState, parallel: int = 1, reuse_nodes: bool = True) -> nodes.SearchPlan:
    """The modelled cost and time to a verified answer of the search, node by node (nodes.search_plan)."""
    return nodes.search_plan(state, parallel, reuse_nodes)


def lanes_for_deadline(
    state: SearchState, parallel: int = 1, reuse_nodes: bool = True
) -> tuple[nodes.SearchPlan, str | None]:
    """The fewest lanes whose modelled time meets the goal's answer-within bound (nodes.lanes_for_deadline)."""
    return nodes.lanes_for_deadline(state, parallel, reuse_nodes)


def kept_spares(spare: list[str], actions: list[Action]) -> list[str]:
    """The spare nodes (offer|plan keys) a decision keeps for its full runs or lane-launching probes (lanes.py)."""
    return lanes.kept_spares(spare, actions)


def claim_lanes(state: SearchState) -> tuple[int, lanes.LanePlan | None]:
    """The claim's request count at the goal's confidence and how the likeliest optimum's full run would be dealt
    over lanes after its probe (policies/lanes.py; modelled), or None when no candidate could meet the goal."""
    requests = full_requests(state.goal)
    near = nodes.near_contenders(state)
    if not near:
        return requests, None
    cand = near[0]
    before = start_seconds(cand, False) + probe_seconds(cand)  # its node, load and probe come first
    # its lanes launched with its probe (policies/acquisition._early_lanes), so their starts overlap it
    head = probe_seconds(cand)
    return requests, lanes.choose(state, cand, requests, True, False, state.goal.budget_usd, before, head_s=head)


def deadline_refusal(state: SearchState, likely: Forecast) -> str | None:
    """Why a goal's `answer within` is refused before any spend: the searches simulated against the belief
    (with the lanes a deadline buys) mostly run out of time before a verified answer, or their median time to
    one is past it; it says the time the search would likely take without the bound. None when it fits."""
    deadline = state.goal.answer_within_s
    late = likely.stops.get("deadline", 0)
    if deadline is None or (2 * late < likely.runs and likely.answer_s_p50 <= deadline):
        return None
    free = forecast(state.model_copy(update={"goal": state.goal.model_copy(update={"answer_within_s": None})}))
    return (
        f"refused before any spend: a verified answer within {deadline / 3600:g} h is out of reach: {late} of "
        f"{likely.runs} searches simulated against the belief ran out of time first (claims' runs over up to "
        f"{lanes.MAX_LANES} lanes, inside the ${state.goal.budget_usd:g} budget); without the bound it likely takes "
        f"{free.answer_s_p50 / 3600:.2f} h (${free.usd_p50:.2f}, simulated): allow 'answer within "
        f"{math.ceil(free.answer_s_p50 / 60)} minutes' or more"
    )
