"""The search: which candidate to measure next, what the measurements teach, and when to stop.

Candidates are offers x valid plans (each plan fixes the replica layout on the node) x capacity, and
the number of nodes a throughput floor needs. The belief is a posterior over the performance model's
parameters per GPU type (policies/belief.py); every candidate's prediction and its uncertainty come
from it (the parameters its plan exercises). Short-step probes give per-step and fixed time, full runs
give the latencies a percentile claim needs (tools/words/stats.py: order statistics when n allows, else the
named parametric bound). A measurement with failed requests, fewer answers than asked, or other load on
the deployment is not evidence: it is retried once on a fresh deployment, then the candidate is failed.

The next action and the stop come from posterior draws (policies/search/acquisition.py): converged when
P(an unverified candidate that meets the constraints beats the chosen one by more than the margin) is
below STOP_LEVEL; infeasible when P(any candidate meets the constraints) is below it (with the nearest
options); budget and iteration cap are last resorts and say so.

This package is the search; its one public API is what this file imports (`__all__`), and it is the only part
of policies/ the agent imports. Its modules, each importing only the ones above it and never this file:
- words.py: the words (Candidate, Measurement, Action, Decision, SearchState);
- candidates.py: the belief about every candidate, judged against the goal and costed;
- evidence.py: folding a measurement in (or rejecting it) and refitting the posterior;
- draws.py: posterior draws of every candidate's objective and feasibility;
- lanes.py: how a claim's full run is dealt over deployments of one plan;
- acquisition.py: the next actions or the stop, from those draws;
- nodes.py: the bound on the search's cost and time to a verified answer, node by node;
- forecast.py: the likely cost and time, from searches simulated against the belief;
- estimates.py: what the spend estimate shows before approval (the claim's lanes, a deadline's refusal).
"""

from __future__ import annotations

from worldtune.policies.search.acquisition import decide
from worldtune.policies.search.candidates import (
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
from worldtune.policies.search.estimates import claim_lanes, deadline_refusal, spend_estimate
from worldtune.policies.search.evidence import recalibrated, record, record_failure
from worldtune.policies.search.forecast import Forecast, forecast, served_probe
from worldtune.policies.search.lanes import LanePlan, freed_lanes, hand_over, kept_spares, reused_nodes
from worldtune.policies.search.nodes import SearchPlan, lanes_for_deadline, search_plan
from worldtune.policies.search.words import (
    CONFIDENCE,
    FULL_REQUESTS,
    MAX_NODES,
    OPTIMISM_Z,
    PROBE_LOW_STEPS,
    PROBE_REPEATS,
    PROBE_WARMUP,
    RETRIES,
    STOP_LEVEL,
    Action,
    ActionKind,
    Assessed,
    Candidate,
    CandidateKey,
    Decision,
    Measurement,
    ModeShift,
    NearestOption,
    Rejected,
    SearchState,
    StopKind,
    offer_of,
    probe_steps,
)

__all__ = [
    "CONFIDENCE",
    "FULL_REQUESTS",
    "MAX_NODES",
    "OPTIMISM_Z",
    "PROBE_LOW_STEPS",
    "PROBE_REPEATS",
    "PROBE_WARMUP",
    "RETRIES",
    "STOP_LEVEL",
    "Action",
    "ActionKind",
    "Assessed",
    "Candidate",
    "CandidateKey",
    "Decision",
    "Forecast",
    "LanePlan",
    "Measurement",
    "ModeShift",
    "NearestOption",
    "Rejected",
    "SearchPlan",
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
    "freed_lanes",
    "full_requests",
    "full_seconds",
    "hand_over",
    "hardware_key",
    "held_offers",
    "initial_state",
    "kept_spares",
    "lanes_for_deadline",
    "objective_value",
    "offer_of",
    "optimistic_value",
    "probe_seconds",
    "probe_sigma",
    "probe_steps",
    "recalibrated",
    "recommendation",
    "record",
    "record_failure",
    "reused_nodes",
    "search_plan",
    "served_probe",
    "spend_estimate",
    "start_seconds",
    "tolerance_bound",
]
