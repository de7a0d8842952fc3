"""Plan the search around nodes: what verifying the near contenders costs, and how long to a verified answer.

Every figure here is MODELLED (the performance model's latencies and load terms, the offers' provisioning
and prices, x 1.25 safety as for every action): nothing is measured. A candidate on an offer whose node the
search already holds (or will hold: the contenders before it on the same offer) pays a warm load of its
plan, not provisioning and a cold load: the node is kept and the plan changed in place (Backend.replan).
A node is released as soon as its last contender is done, so its hours end there.

Time to a verified answer is the wall time of the search on real infra: provisioning, loads and requests,
node after node; with `parallel` N, an offer's contenders are dealt over up to N nodes of it (each pays its
own provisioning and cold load: dollars for time), and nodes overlap (N lanes, the longest node first to
the least loaded lane); contenders on one node run one after another. A contender's full run is dealt over
the deployments policies/search/lanes.py gives it (extra nodes, each its own provisioning and cold load).
`lanes_for_deadline` picks the fewest lanes whose modelled time meets a goal's `answer within` inside its budget.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, Field

from worldtune.policies.search import lanes as claim_lanes
from worldtune.policies.search.candidates import (
    action_cost,
    candidates,
    could_be_feasible,
    full_requests,
    objective_value,
    optimistic_value,
)
from worldtune.policies.search.words import Candidate, SearchState

NEAR = 8  # the near contenders the estimate probes (as before issue 18)
FULL = 2  # of which the likeliest get a full run
BASIS = (
    "modelled: performance-model latencies and load terms (profiles' basis: load_* published for H200, assumed "
    "elsewhere), the offers' provisioning seconds and prices, x 1.25 safety; nothing measured"
)


class NodeUse(BaseModel):
    """One node of the search plan: the offer, the contenders verified on it in order, its modelled seconds."""

    offer: str
    keys: list[str]
    seconds: float
    usd: float
    gpu_hours: float
    cold_loads: int
    warm_loads: int
    lanes: int = Field(default=0, description="extra deployments its claims' runs were dealt over")


class SearchPlan(BaseModel):
    """The modelled cost and time to a verified answer of the search, node by node."""

    usd: float = Field(description="expected spend, USD (capped at the budget)")
    gpu_hours: float
    answer_s: float = Field(description="modelled wall seconds from approval to a verified answer")
    deployments: int = Field(description="nodes provisioned")
    cold_loads: int
    warm_loads: int
    parallel: int
    reuse_nodes: bool
    keys: list[str] = Field(default_factory=list, description="the contenders, in the order they are verified")
    nodes: list[NodeUse] = Field(default_factory=list)
    basis: str = BASIS


def _lanes(seconds: list[float], parallel: int) -> float:
    """Wall time of independent nodes on `parallel` lanes: the longest first to the least loaded lane."""
    lanes = [0.0] * max(1, parallel)
    for s in sorted(seconds, reverse=True):
        lanes[lanes.index(min(lanes))] += s
    return max(lanes)


def near_contenders(state: SearchState) -> list[Candidate]:
    """The candidates within 20% of the best optimistic objective, at most NEAR, best first."""
    goal = state.goal
    ranked = [c for c in candidates(state) if could_be_feasible(goal, c)]
    if not ranked:
        return []
    top = objective_value(goal, ranked[0])
    return [c for c in ranked if optimistic_value(goal, c) <= top * 1.2][:NEAR]


def search_plan(
    state: SearchState,
    parallel: int = 1,
    reuse_nodes: bool = True,
    loads: Callable[[Candidate], Candidate] | None = None,
) -> SearchPlan:
    """Probe every near contender, full-run the likeliest FULL; with `reuse_nodes`, one node per offer.

    `loads` may rewrite a candidate's load terms first (the node-reuse benchmark's "before" counts every load
    as it was counted before issue 18).
    """
    near = [loads(c) if loads else c for c in near_contenders(state)]
    groups: dict[str, list[tuple[int, Candidate]]] = {}
    for i, cand in enumerate(near):
        groups.setdefault(cand.offer.id if reuse_nodes else cand.key, []).append((i, cand))
    if parallel > 1:  # N lanes rent up to N nodes of one offer (the graph deploys a new node for a second action)
        split: dict[str, list[tuple[int, Candidate]]] = {}
        for group, members in groups.items():
            k = min(parallel, len(members))
            for j, member in enumerate(members):
                split.setdefault(f"{group}#{j % k}", []).append(member)
        groups = split
    used: list[NodeUse] = []
    requests = full_requests(state.goal)
    for members in groups.values():
        seconds = usd = extra_s = 0.0
        extra = 0
        for j, (i, cand) in enumerate(members):
            s, u = action_cost(cand, "probe", False, node_held=j > 0)
            if i < FULL:  # the claim's run, in the lanes the search would give it (policies/search/lanes.py)
                lane = claim_lanes.choose(state, cand, requests, True, False, state.goal.budget_usd, seconds + s)
                s, u = s + lane.seconds, u + lane.usd
                extra, extra_s = extra + lane.lanes - 1, extra_s + lane.node_seconds - lane.seconds
            seconds, usd = seconds + s, usd + u
        offer = members[0][1].offer
        used.append(
            NodeUse(
                offer=offer.id,
                keys=[c.key for _, c in members],
                seconds=seconds,
                usd=usd,
                gpu_hours=(seconds + extra_s) / 3600.0 * offer.gpu_count,
                cold_loads=1 + extra,
                warm_loads=len(members) - 1,
                lanes=extra,
            )
        )
    return SearchPlan(
        usd=min(sum(n.usd for n in used), state.goal.budget_usd),
        gpu_hours=sum(n.gpu_hours for n in used),
        answer_s=_lanes([n.seconds for n in used], parallel) if used else 0.0,
        deployments=len(used) + sum(n.lanes for n in used),
        cold_loads=sum(n.cold_loads for n in used),
        warm_loads=sum(n.warm_loads for n in used),
        parallel=parallel,
        reuse_nodes=reuse_nodes,
        keys=[c.key for c in near],
        nodes=used,
    )


MAX_LANES = 4  # the most nodes a deadline may make the search rent at once


def lanes_for_deadline(
    state: SearchState, parallel: int = 1, reuse_nodes: bool = True
) -> tuple[SearchPlan, str | None]:
    """The search plan with the fewest lanes (from `parallel`, at most MAX_LANES) whose modelled time to a verified
    answer meets the goal's `answer within` and whose modelled spend fits the budget, and why it has that many;
    without a deadline, or when none meets it, the plan at `parallel` (and why, for the latter)."""
    given = search_plan(state, parallel, reuse_nodes)
    deadline = state.goal.answer_within_s
    if deadline is None or given.answer_s <= deadline:
        return given, None
    for lanes in range(parallel + 1, MAX_LANES + 1):
        plan = search_plan(state, lanes, reuse_nodes)
        if plan.answer_s <= deadline and sum(n.usd for n in plan.nodes) <= state.goal.budget_usd:
            return plan, (
                f"{lanes} lanes: {given.answer_s / 3600:.2f} h modelled at {parallel} is past the goal's answer within "
                f"{deadline / 3600:g} h; {lanes} nodes at once make it {plan.answer_s / 3600:.2f} h for "
                f"${plan.usd:.2f} instead of ${given.usd:.2f} (dollars for time, inside the ${state.goal.budget_usd:g} "
                "budget)"
            )
    return given, (
        f"no lane count up to {MAX_LANES} meets the goal's answer within {deadline / 3600:g} h inside the "
        f"${state.goal.budget_usd:g} budget: the search runs at {parallel} and stops when the time is up"
    )
