"""What the spend estimate shows before approval: the search's expected spend, how the claim's run would be dealt
over lanes, and why a goal's `answer within` is refused before any spend."""

from __future__ import annotations

import math

from worldtune.policies.search import lanes, nodes
from worldtune.policies.search.candidates import full_requests, probe_seconds, start_seconds
from worldtune.policies.search.forecast import Forecast, forecast
from worldtune.policies.search.words import SearchState


def spend_estimate(state: SearchState, parallel: int = 1) -> tuple[float, float, list[str]]:
    """Expected USD and GPU-hours of the search: a probe for every near contender, full runs for the likeliest,
    candidates on one offer sharing its node (nodes.py)."""
    plan = nodes.search_plan(state, parallel, state.reuse_nodes)
    return plan.usd, plan.gpu_hours, plan.keys


def claim_lanes(state: SearchState) -> tuple[int, lanes.LanePlan | None]:
    """The claim's request count at the goal's confidence and how the likeliest optimum's full run would be dealt
    over lanes after its probe (lanes.py; modelled), or None when no candidate could meet the goal."""
    requests = full_requests(state.goal)
    near = nodes.near_contenders(state)
    if not near:
        return requests, None
    cand = near[0]
    before = start_seconds(cand, False) + probe_seconds(cand)  # its node, load and probe come first
    # its lanes launched with its probe (lanes.early_lanes), so their starts overlap it
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
