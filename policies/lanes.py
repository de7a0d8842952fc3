"""The claim's run in lanes: a full run's requests dealt over several deployments of one plan, started together.

A full run of n requests on one node takes n / replicas rounds, one after another. Dealt over L deployments of
the same plan on the same offer (L nodes, each its own provisioning and cold load; the first lane may be the
candidate's live deployment or a node the search holds), the rounds overlap: wall time falls to the slowest
lane, GPU-hours rise by the extra lanes' starts. Requests are dealt so that the lanes finish together (the lane
that starts first takes more). Every figure here is MODELLED (the performance model's latency and load terms,
the offer's provisioning and price, x the actions' safety factor): nothing is measured.

How many lanes (`choose`): the fewest whose run ends inside the time the goal leaves for an answer and whose
cost fits what is left of the budget; with no `answer within`, the fewest that bring the answer inside
DEFAULT_ANSWER_S while the extra GPU-hours stay within DEFAULT_EXTRA of the search's (so far plus this run);
when no count reaches the time, the fastest one allowed. The search's full-run Action carries the choice
(`lanes`, `lane_requests`); the estimate (policies/nodes.py) and the forecast (policies/forecast.py) cost it.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, Field

from worldtune.policies.candidates import Candidate, SearchState, start_seconds
from worldtune.tools.words.plan import Plan

MAX_LANES = 8  # the most deployments one claim's run rents at once
DEFAULT_ANSWER_S = 3600.0  # without `answer within`: aim at a verified answer within the hour...
DEFAULT_EXTRA = 0.20  # ...at no more than this share of extra GPU-hours
SAFETY = 1.25  # as every action's modelled cost (candidates.action_cost)


class LanePlan(BaseModel):
    """One full run dealt over `lanes` deployments of one plan: requests per lane and its modelled cost."""

    lanes: int = Field(ge=1)
    requests: list[int] = Field(description="requests per lane, the first lane first")
    seconds: float = Field(description="modelled wall seconds, from the action's start to the slowest lane's end")
    node_seconds: float = Field(description="modelled node-seconds billed over every lane (starts included)")
    usd: float
    gpu_hours: float
    why: str = ""


def deal(starts: list[float], requests: int, replicas: int, latency_s: float) -> list[int]:
    """Requests per lane so that the lanes end as close together as they can: each round of `replicas`
    requests goes to the lane that would end it first (a lane that starts earlier takes more)."""
    counts = [0] * len(starts)
    left = requests
    while left > 0:
        ends = [s + (math.ceil(c / replicas) + 1) * latency_s for s, c in zip(starts, counts, strict=True)]
        i = ends.index(min(ends))
        take = min(replicas, left)
        counts[i] += take
        left -= take
    return counts


def plan(
    cand: Candidate, requests: int, lanes: int, deployed: bool, node_held: bool = False, safety: float = SAFETY
) -> LanePlan:
    """The full run of `requests` over `lanes` deployments: the first as the candidate starts now (live, a held
    node or a new one), the others new nodes (provisioning and a cold load); modelled seconds and cost."""
    replicas = Plan.parse(cand.plan).replicas
    starts = [start_seconds(cand, deployed, node_held)] + [start_seconds(cand, False)] * (lanes - 1)
    counts = deal(starts, requests, replicas, cand.latency_s)
    ends = [s + math.ceil(c / replicas) * cand.latency_s for s, c in zip(starts, counts, strict=True) if c > 0]
    node_s = sum(ends) * safety
    return LanePlan(lanes=len(ends), requests=[c for c in counts if c > 0], seconds=max(ends) * safety,
                    node_seconds=node_s, usd=cand.offer.usd_per_hour * node_s / 3600.0,
                    gpu_hours=cand.offer.gpu_count * node_s / 3600.0)  # fmt: skip


def choose(
    state: SearchState, cand: Candidate, requests: int, deployed: bool, node_held: bool, left_usd: float,
    elapsed_s: float | None = None,
) -> LanePlan:  # fmt: skip
    """How many lanes this full run takes (the module's rule), with why. `elapsed_s`: the search's modelled
    seconds before this run starts (default: the state's)."""
    goal = state.goal
    elapsed = state.elapsed_s if elapsed_s is None else elapsed_s
    one = plan(cand, requests, 1, deployed, node_held)
    bounded = goal.answer_within_s is not None
    target = (goal.answer_within_s if bounded else DEFAULT_ANSWER_S) - elapsed  # type: ignore[operator]
    extra_cap = math.inf if bounded else DEFAULT_EXTRA * (state.spent_gpu_hours + one.gpu_hours)
    if one.seconds <= target or requests <= Plan.parse(cand.plan).replicas:
        return one.model_copy(update={"why": "one lane: the run fits the time to an answer"})
    allowed = [one]
    for lanes in range(2, MAX_LANES + 1):
        p = plan(cand, requests, lanes, deployed, node_held)
        if p.lanes < lanes or p.usd > left_usd or p.gpu_hours - one.gpu_hours > extra_cap:
            break  # more lanes only cost more (or get no requests)
        allowed.append(p)
        if p.seconds <= target:
            break
    best = min(allowed, key=lambda p: (p.seconds > target, p.seconds if p.seconds > target else p.lanes))
    limit = f"answer within {goal.answer_within_s / 3600:g} h" if bounded else (  # type: ignore[operator]
        f"the default aim of an answer within {DEFAULT_ANSWER_S / 3600:g} h at no more than "
        f"+{DEFAULT_EXTRA:.0%} GPU-hours")  # fmt: skip
    met = "meets" if best.seconds <= target else "is the fastest allowed, short of"
    why = (f"{best.lanes} lane(s) of {cand.plan} on {cand.offer.id} ({'/'.join(map(str, best.requests))} requests): "
           f"{best.seconds / 3600:.2f} h modelled instead of {one.seconds / 3600:.2f} h on one, "
           f"+{best.gpu_hours - one.gpu_hours:.2f} GPU-h; {met} {limit}")  # fmt: skip
    return best.model_copy(update={"why": why})


def simulate(
    state: SearchState, starts: list[float], latencies: list[list[float]], replicas: int
) -> tuple[list[float], float, float, str]:
    """A lane run served sample by sample (SIMULATED, for the forecast): each lane's rounds after its start,
    the answers pooled in the order they end and checked against the claim as they arrive; once the goal
    cannot be met the run stops there. (kept latencies, wall seconds, node-seconds, why it stopped or '')."""
    from worldtune.tools.words import stats

    goal = state.goal
    ends: list[tuple[float, int, float]] = []  # (when it ends, lane, latency)
    for lane, (start, values) in enumerate(zip(starts, latencies, strict=True)):
        t = start
        for i in range(0, len(values), replicas):
            t += max(values[i : i + replicas])
            ends += [(t, lane, v) for v in values[i : i + replicas]]
    ends.sort()
    final = [max([start] + [t for t, lane, _ in ends if lane == i]) for i, start in enumerate(starts)]
    kept: list[float] = []
    for t, _lane, v in ends:
        kept.append(v)
        if goal.latency_bound_s is None:
            continue
        check = stats.check_claim(kept, goal.latency_percentile, goal.confidence, goal.latency_bound_s)
        if check.state == "failed":  # every lane is torn down now: one still running is billed until now
            return kept, t, sum(min(end, t) for end in final), check.reason
    return kept, max(final), sum(final), ""
