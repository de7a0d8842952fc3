"""The search's decisions from posterior draws: what to measure next, and when to stop.

Draws of every GPU type's parameters (Gaussian in the belief's coordinates) move each candidate's log
latency and log service time through its sensitivities, plus an independent error of its own (the
model's, or its probe's); measured candidates keep their measured values. From the draws:
- P(feasible) of each candidate and of "any candidate" (infeasible below search.STOP_LEVEL);
- P(an unverified feasible candidate beats the best verified by more than the margin) (converged below it);
- each candidate's expected improvement over the best verified by the margin (before one exists: over the
  plan the search would verify now by the margin, or the best predicted before any probe), and the value of
  measuring it: its own expected improvement plus the share of the others' it would resolve (rho^2 of their
  draws with its own), per expected dollar.
Once something is verified, the most likely optimum gets its full run once its probe pins it, if it could alone
keep the search from stopping (P(it beats the verified best by more than the margin) >= STOP_LEVEL). Before, the full
run (many probes' worth) goes to the probed candidate whose verification would most likely let the search stop
(P(no open candidate beats it by the margin)). Either way, an unprobed candidate goes first when P(it beats the
full run's plan by the margin) x the full run's cost exceeds its probe's cost, so the claim's requests are not
spent on a plan the next probes displace.
Otherwise the best value per dollar is probed, which is how a plan whose only use is to tell two hypotheses
apart gets chosen.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from worldtune.policies import belief
from worldtune.policies.search import lanes
from worldtune.policies.search.candidates import (
    action_cost,
    assess,
    best_verified,
    full_requests,
    hardware_key,
    held_offers,
    objective_value,
    start_seconds,
)
from worldtune.policies.search.draws import DRAWS, Draws, draws, nearest_options
from worldtune.policies.search.lanes import LanePlan
from worldtune.policies.search.words import (
    FULL_REQUESTS,
    STOP_LEVEL,
    Action,
    ActionKind,
    Candidate,
    Decision,
    SearchState,
    StopKind,
)
from worldtune.tools.words.goal import Goal
from worldtune.tools.words.plan import Plan


def _values(d: Draws, goal: Goal, reference: np.ndarray, open_: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Expected improvement of each candidate over `reference` (per draw), and the value of measuring it."""
    scale = max(float(np.median(np.abs(reference))), float(np.median(np.abs(d.objective[open_]))), 1e-9)
    gain = np.where(d.feasible, np.maximum(reference[None, :] - d.objective, 0.0), 0.0) / scale
    ei = np.where(open_, gain.mean(axis=1), 0.0)
    return ei, _with_others(d, ei)


def _with_others(d: Draws, own: np.ndarray) -> np.ndarray:
    """Each candidate's own expected improvement plus the share of the others' its measurement would resolve
    (rho^2 of their log-latency draws with its own)."""
    value = own.copy()
    live = np.flatnonzero(own > 0)
    if live.size > 1:
        dev = d.log_latency[live] - d.log_latency[live].mean(axis=1, keepdims=True)
        norms = np.sqrt((dev**2).sum(axis=1))
        ok = norms > 1e-12
        rho = np.zeros((live.size, live.size))
        rho[np.ix_(ok, ok)] = (dev[ok] @ dev[ok].T) / np.outer(norms[ok], norms[ok])
        np.fill_diagonal(rho, 0.0)
        value[live] = own[live] + (rho**2) @ own[live]
    return value


def decide(state: SearchState, parallel: int = 1, margin: float = 0.03, max_iterations: int = 40) -> Decision:
    """The next actions (at most `parallel`, on distinct hardware), or the reason to stop."""
    goal = state.goal
    assessed = assess(state)
    ranked = [a.cand for a in assessed]
    best = best_verified(state, ranked)
    best_key = best.key if best else None
    d = draws(state, assessed)
    p_any = float(d.feasible.any(axis=0).mean())
    if state.iterations >= max_iterations:
        return Decision(stop_reason=f"iteration cap reached ({max_iterations} measurements): a last resort, "
                           "not a verdict", stop_kind="iteration_cap", best=best_key, p_feasible=p_any)  # fmt: skip
    open_ = np.asarray([c.stage != "measured" and c.key not in state.failed for c in ranked])
    if best is None and p_any < STOP_LEVEL:
        nearest = nearest_options(state, d)
        near = "; ".join(f"{o.plan} on {o.gpu}: p{goal.latency_percentile} ~{o.latency_q_s:.1f} s, meets "
                         f"{o.would_meet_s:.1f} s at 95%, ${o.usd_per_clip:.3f}/clip" for o in nearest)  # fmt: skip
        return Decision(
            stop_reason=f"infeasible: P(any candidate meets the constraints) = {p_any:.1%} < {STOP_LEVEL:.0%} "
            f"under the posterior; nearest: {near}",
            stop_kind="infeasible", p_feasible=p_any, nearest=nearest,
        )  # fmt: skip
    if best is not None:
        value_best = objective_value(goal, best)
        threshold = value_best - margin * abs(value_best)
        beats = d.feasible & (d.objective < threshold) & open_[:, None]
        p_beaten = float(beats.any(axis=0).mean())
        if p_beaten < STOP_LEVEL:
            return Decision(
                stop_reason=f"converged: {best.plan} on {best.offer.id} meets the goal ({best.evidence}); "
                f"P(an unverified candidate beats it by more than {margin:.0%}) = {p_beaten:.1%} < "
                f"{STOP_LEVEL:.0%} under the posterior ({DRAWS} draws): "
                f"{1 - STOP_LEVEL:.0%} confidence none does",
                stop_kind="converged", best=best_key, p_beaten=p_beaten, p_feasible=1.0,
            )  # fmt: skip
        reference = np.full(d.objective.shape[1], threshold)
        lead = None
    else:
        p_beaten = None
        lead, reference = _unverified_reference(state, d, ranked, open_, margin)
    ei, value = _values(d, goal, reference, open_)
    worth = _production_value(goal, best, d, open_, margin)
    return _choose(state, d, ei, value, open_, best, parallel, p_beaten, p_any, margin, lead, worth)


def _ready(state: SearchState, cands: list[Candidate]) -> set[str]:
    """Candidates whose next measurement is a full run: probed, or measured without a verdict."""
    return {c.key for c in cands if c.stage == "probed" or c.key in state.inconclusive}


def _unverified_reference(
    state: SearchState, d: Draws, ranked: list[Candidate], open_: np.ndarray, margin: float
) -> tuple[tuple[int, float] | None, np.ndarray]:
    """Before anything is verified: the plan the search would verify now (the probed, likely feasible candidate
    whose verification most likely ends the search) with that chance, and what improvement is measured against:
    that plan's value less the margin; with nothing probed, the best predicted mean among the likely feasible;
    with none likely feasible, the dearest candidate (being feasible is then what counts)."""
    n = d.objective.shape[1]
    ready = _ready(state, ranked)
    pool = [i for i, c in enumerate(ranked) if open_[i] and c.key in ready and float(d.feasible[i].mean()) >= 0.5]
    if pool:
        stops = p_stop_if_verified(d, open_, pool, margin)
        top = pool[int(np.argmax(stops))]
        own = float(np.mean(d.objective[top]))
        return (top, float(np.max(stops))), np.full(n, own - margin * abs(own))
    likely = [float(np.mean(d.objective[i])) for i in range(len(ranked)) if open_[i] and d.feasible[i].mean() >= 0.5]
    if likely:
        return None, np.full(n, min(likely))
    means = np.asarray([objective_value(state.goal, c) for c in ranked])
    return None, np.full(n, float(np.max(means[np.isfinite(means)])))


def p_stop_if_verified(d: Draws, open_: np.ndarray, indices: list[int], margin: float) -> np.ndarray:
    """For each candidate of `indices`: the share of draws where it is feasible and no other open candidate beats
    it by more than the margin, i.e. how likely verifying it (at its drawn value) would let the search stop."""
    obj = np.where(d.feasible & open_[:, None], d.objective, np.inf)
    if obj.shape[0] < 2:
        return np.asarray([float(d.feasible[i].mean()) for i in indices])
    order = np.argsort(obj, axis=0)
    first, second = order[0], order[1]
    cols = np.arange(obj.shape[1])
    out = []
    for i in indices:
        rival = np.where(first == i, obj[second, cols], obj[first, cols])
        own = d.objective[i]
        out.append(float((d.feasible[i] & ~(rival < own - margin * np.abs(own))).mean()))
    return np.asarray(out)


def _worth_first(
    state: SearchState, d: Draws, full: int, ready: set[str], open_: np.ndarray, held: set[str], requests: int,
    margin: float,
) -> list[tuple[float, int]]:  # fmt: skip
    """(gain, index) of each unprobed open candidate whose probe costs less than what it would likely save before
    a full run of `full` (many probes' worth), in the candidates' order. The saving is P(it is feasible and beats
    `full` by the margin) x the full run's cost, since that full run would then be spent on a plan the search does
    not end on."""
    cands = d.cands
    target = cands[full]
    _, full_usd = action_cost(target, "full", target.key in state.deployed, requests=requests,
                                 node_held=target.offer.id in held)  # fmt: skip
    own = d.objective[full]
    worth: list[tuple[float, int]] = []
    for i, c in enumerate(cands):
        if i == full or not open_[i] or c.key in ready:
            continue
        p = float((d.feasible[i] & (d.objective[i] < own - margin * np.abs(own))).mean())
        if p * full_usd <= 0.0:
            continue
        _, probe_usd = action_cost(c, "probe", c.key in state.deployed, node_held=c.offer.id in held)
        if p * full_usd - probe_usd > 0.0:
            worth.append((p * full_usd - probe_usd, i))
    return worth


def _probe_first(
    state: SearchState, d: Draws, order: list[tuple[float, int, str]], full: int, ready: set[str],
    open_: np.ndarray, held: set[str], requests: int, margin: float,
) -> list[tuple[float, int, str]]:  # fmt: skip
    """Before a full run of `full`: the unprobed candidate most worth probing first (_worth_first) goes first."""
    worth = _worth_first(state, d, full, ready, open_, held, requests, margin)
    if not worth:
        return order
    pick = max(worth, key=lambda g: g[0])[1]
    kept = [entry for entry in order if entry[2] != "likeliest optimum"]
    return [(1e300, pick, "could displace the likeliest optimum"), *kept]


def _choose(
    state: SearchState, d: Draws, ei: np.ndarray, value: np.ndarray, open_: np.ndarray,
    best: Candidate | None, parallel: int, p_beaten: float | None, p_any: float, margin: float = 0.03,
    lead: tuple[int, float] | None = None, worth: _Worth | None = None,
) -> Decision:  # fmt: skip
    """Retries first; then the full run that most likely lets the search stop (`lead`, before anything is
    verified), unless a probe is worth more first; then the best value per dollar. Once an answer is verified,
    only what is worth more than it costs (`worth`)."""
    goal = state.goal
    cands = d.cands
    masked = np.where(d.feasible, d.objective, np.inf)
    winner = np.argmin(masked, axis=0)
    p_best = np.bincount(winner[np.isfinite(masked.min(axis=0))], minlength=len(cands)) / d.objective.shape[1]
    ready = _ready(state, cands)
    requests = full_requests(goal)
    held = held_offers(state)  # nodes the search holds: a candidate there pays a warm load, no provisioning
    order, lead_full = _order(state, d, value, open_, best, lead, ready, p_best, held, requests, margin)
    p_stop = lead[1] if lead is not None else None  # decide gives a lead only while nothing is verified
    left = goal.budget_usd - state.spent_usd
    actions: list[Action] = []
    used: set[str] = set()
    skipped = late = 0
    unworthy: list[tuple[float, float, int]] = []  # (value $, cost $, index) of measurements worth less than they cost
    cheapest: dict[str, int] = {}  # the same measurement on the cheapest offer of that hardware
    for i, c in enumerate(cands):
        hw = hardware_key(c.key)
        if open_[i] and (hw not in cheapest or c.offer.usd_per_hour < cands[cheapest[hw]].offer.usd_per_hour):
            cheapest[hw] = i
    for _score, i0, why in order:
        i = i0 if why == "retry" else cheapest.get(hardware_key(cands[i0].key), i0)
        cand = cands[i]
        if len(actions) >= parallel:
            break
        if hardware_key(cand.key) in used:
            continue
        retry = why == "retry"
        rejected_full = any(r.key == cand.key and r.kind == "full" for r in state.rejected)
        full = cand.key in ready or cand.stage == "measured" or (retry and rejected_full)
        kind: ActionKind = "full" if full else "probe"
        deployed = cand.key in state.deployed and not retry
        on_node = not deployed and not retry and cand.offer.id in held
        n = requests
        seconds, usd = action_cost(cand, kind, deployed, requests=n, node_held=on_node)
        note = ""
        if kind == "full" and usd > left:
            n = FULL_REQUESTS  # the claim's count does not fit: a short run, and the claim will say so
            seconds, usd = action_cost(cand, kind, deployed, requests=n, node_held=on_node)
            note = f"; only {n} requests fit the budget, so p{goal.latency_percentile} will not be claimable"
        lane = None
        if kind == "full" and n > FULL_REQUESTS:  # the claim's run dealt over lanes (policies/search/lanes.py)
            lane = lanes.choose(state, cand, n, deployed, on_node, left)
            seconds, usd = lane.seconds, lane.usd
            note += f"; {lane.why}" if lane.lanes > 1 else ""
        if usd > left:
            skipped += 1
            continue
        if worth is not None and not retry:
            gain = max(float(worth.share[i]), float(worth.share[i0])) * worth.usd
            if gain <= usd:
                unworthy.append((gain, usd, i))
                continue
            note += f"; worth ${gain:,.2f} against its ${usd:,.2f} ({worth.says})"
        early = None
        # the probe the search makes just before the full run it has in view: that run's lanes start with it
        before_run = why in ("likeliest optimum", "could displace the likeliest optimum")
        if kind == "probe" and not actions and lead_full is not None and before_run:
            run = _run_after(i, cands, p_best, lead_full)
            # nodes are launched only with the last probe worth making before that run: with another challenger
            # still worth a probe, they would wait through its probe too (kept spares only if that is cheaper)
            rivals = [j for _, j in _worth_first(state, d, run, ready, open_, held, requests, margin) if j != i]
            early = _early_lanes(state, cand, cands[run], seconds, left - usd, requests, p_best, cands,
                                 launch=not rivals)  # fmt: skip
            if early is not None:
                seconds, usd = seconds + early.seconds, usd + early.usd
        if goal.answer_within_s is not None and state.elapsed_s + seconds > goal.answer_within_s:
            late += 1  # it would finish after the time the goal allows for an answer
            continue
        left -= usd
        used.add(hardware_key(cand.key))
        if on_node:
            held.discard(cand.offer.id)  # one node runs one plan at a time
        actions.append(Action(
            key=cand.key, kind=kind, expected_usd=usd, expected_s=seconds, needs_deploy=not deployed,
            reason=_why(state, d, i, why, ei, value, p_best, best, kind, n, p_stop, margin) + note,
            requests=n if kind == "full" else 0, lanes=lane.lanes if lane else 1,
            lane_requests=lane.requests if lane else [],
            redeploy=retry, value=float(value[i]),
            early_lanes=early.lanes.lanes - 1 - early.spare if early else 0, early_plan=early.plan if early else "",
            spares_held=early.spare if early else 0, early_after_s=early.after_s if early else 0.0,
        ))  # fmt: skip
        if early:
            actions[-1].reason += f"; {early.why}"
    if not actions and best is not None and worth is not None and unworthy:
        return _not_worth(best, p_beaten, unworthy, d.cands, worth, margin)
    if not actions:
        return _nothing_fits(state, d, best, p_beaten, p_any, skipped, late, bool(order))
    return Decision(actions=actions, best=best.key if best else None, p_beaten=p_beaten, p_feasible=p_any)


def _order(
    state: SearchState, d: Draws, value: np.ndarray, open_: np.ndarray, best: Candidate | None,
    lead: tuple[int, float] | None, ready: set[str], p_best: np.ndarray, held: set[str], requests: int, margin: float,
) -> tuple[list[tuple[float, int, str]], int | None]:  # fmt: skip
    """What to measure, best first: retries; the likeliest optimum's full run (or a probe worth more before it);
    then every open candidate by its value per expected dollar. Also the likeliest optimum's index (or None)."""
    cands = d.cands
    order: list[tuple[float, int, str]] = []
    for i, c in enumerate(cands):
        if c.key in state.retry:
            order.append((math.inf, i, "retry"))
    if best is None:
        # Nothing verified: the search cannot stop until something is. The full run goes to the probed plan whose
        # verification most likely ends it; _probe_first puts an unprobed plan's probe first when that is cheaper
        # than the full run it would likely waste, which is what keeps a displaced plan from being run in full.
        if lead is not None:
            order.append((1e300, lead[0], "likeliest optimum"))
    else:
        # ties (hundreds of near-equal plans share the draws' wins, so each may win none) go to the best mean
        mean_objective = np.where(d.feasible, d.objective, np.inf).mean(axis=1)
        pool = [i for i in range(len(cands)) if open_[i]]
        top = max(pool, key=lambda i: (p_best[i], -mean_objective[i]), default=None)
        best_share = p_best[[i for i, c in enumerate(cands) if c.key == best.key]].sum()
        # once something is verified, only a probed challenger that wins at least as many draws displaces it, and
        # only when it alone could keep the search from stopping: P(it beats the best by more than the margin) at
        # least STOP_LEVEL. A challenger within the margin is no better an answer; its full run buys nothing the
        # stop needs (the probes of the others resolve the rest, and its value per dollar still ranks it)
        value_best = objective_value(state.goal, best)
        if top is not None and cands[top].key in ready and p_best[top] > 0 and p_best[top] >= best_share:
            beats = d.feasible[top] & (d.objective[top] < value_best - margin * abs(value_best))
            if float(beats.mean()) >= STOP_LEVEL:
                order.append((1e300, top, "likeliest optimum"))
    full = next((i for score, i, why in order if why == "likeliest optimum"), None)
    if full is not None:
        order = _probe_first(state, d, order, full, ready, open_, held, requests, margin)
    for i, c in enumerate(cands):
        if open_[i] and value[i] > 0:
            _, usd = action_cost(
                c, "full" if c.key in ready else "probe", c.key in state.deployed, requests=requests,
                node_held=c.offer.id in held,
            )  # fmt: skip
            order.append((value[i] / max(usd, 1e-6), i, "value"))
    order.sort(key=lambda t: -t[0])
    return order, full


EARLY_P = 0.8  # lanes are launched with a probe only when the optimum is this likely on their offer


class _Early(NamedTuple):
    """The full run's lanes as they would be dealt, and what launching the new ones with the probe adds."""

    lanes: LanePlan
    seconds: float  # modelled seconds the probe action lasts longer (a lane's start outlasting the probe)
    usd: float  # the new lanes' start (and wait for the run), billed with the probe
    spare: int  # spare nodes already up on the offer, kept through the probe for the run
    why: str
    plan: str
    after_s: float  # modelled seconds into the probe at which they are launched


def _run_after(probe: int, cands: list[Candidate], p_best: np.ndarray, lead: int | None) -> int:
    """The full run likely after the probe of candidate `probe` on its offer: the likeliest optimum when it is
    there, else the plan there that wins the most draws; the probed plan itself when it wins more draws."""
    offer = cands[probe].offer.id
    there = [i for i, c in enumerate(cands) if c.offer.id == offer]
    target = lead if lead is not None and cands[lead].offer.id == offer else max(there, key=lambda i: float(p_best[i]))
    return probe if float(p_best[probe]) > float(p_best[target]) else target


def _early_lanes(
    state: SearchState, cand: Candidate, target: Candidate, probe_s: float, left_usd: float, requests: int,
    p_best: np.ndarray, cands: list[Candidate], launch: bool = True,
) -> _Early | None:  # fmt: skip
    """New nodes of `target`'s offer to launch with `cand`'s probe, when the claim's run of `target` (the
    likeliest optimum) would be dealt over lanes: their provisioning and cold load then overlap the probe
    instead of delaying the run. Only for a probe on the same offer (a node serves either plan: a warm load
    replans it) and when the optimum is likely (EARLY_P) on that offer; None when no lane is worth launching.
    `launch` False (another probe is likely before the run): no new node, and a spare node already up is kept
    through this probe only when that costs less than starting it again."""
    if cand.offer.id != target.offer.id or requests <= Plan.parse(target.plan).replicas:
        return None
    on_offer = float(sum(p for p, c in zip(p_best, cands, strict=True) if c.offer.id == target.offer.id))
    if on_offer < EARLY_P:
        return None
    run = target  # they start under the plan likely run in full (_run_after; another one replans them warm)
    head = probe_s / lanes.SAFETY
    own = run.key == cand.key  # the probe's node is the run's first lane (else it is replanned to it)
    choice = lanes.choose(state, run, requests, own, not own, left_usd, state.elapsed_s + head, head_s=head)
    cold = start_seconds(run, False) * lanes.SAFETY  # launched late enough in the probe to be up at its end
    up = sum(1 for key in state.spare_lanes if key.split("|", 1)[0] == run.offer.id)
    spare = min(up, choice.lanes - 1)  # kept through the probe (billed while it runs); more are freed
    if not launch and probe_s >= cold:
        spare = 0  # holding them through this probe costs more than starting them again
    new = choice.lanes - 1 - spare if launch else 0
    if new <= 0 and spare == 0:
        return None
    usd = run.offer.usd_per_hour * (new * cold + spare * probe_s) / 3600.0
    if usd > left_usd:
        return None
    plan = run.plan
    kept = f"{spare} spare node(s) kept" + (" and " if new else "") if spare else ""
    why = (f"{kept}{f'{new} node(s) of {run.offer.id} under {plan} launched' if new else ''} with this probe for "
           f"the claim's run (P(optimum on this offer) {on_offer:.0%}): {choice.why}")  # fmt: skip
    after = max(0.0, probe_s - cold) / lanes.SAFETY
    return _Early(choice, max(0.0, cold - probe_s) if new else 0.0, usd, spare, why, plan, after)


class _Worth(NamedTuple):
    """What measuring each candidate is worth once an answer is verified: `share` of the production's cost."""

    usd: float  # the production's cost under the verified answer: its cost per clip x the clips it will make
    share: np.ndarray  # per candidate: the expected improvement it may find, as a share of the answer's value
    says: str


def _production_value(goal: Goal, best: Candidate | None, d: Draws, open_: np.ndarray, margin: float) -> _Worth | None:
    """Once an answer is verified, a measurement is bought only when what it may find is worth more than it costs:
    the objective's expected improvement over the answer, counted where it is beyond the margin (a plan within
    the margin is no better an answer), plus the share of the others' it would resolve (rho^2, as _values), times
    the production's cost. Before, finding any verified answer is what a measurement is for: the probabilities
    decide alone."""
    if best is None or best.usd_per_clip <= 0 or not math.isfinite(best.usd_per_clip):
        return None
    value_best = objective_value(goal, best)
    size = max(abs(value_best), 1e-12)
    better = d.feasible & (d.objective < value_best - margin * size) & open_[:, None]
    gain = np.where(better, value_best - d.objective, 0.0) / size
    share = _with_others(d, gain.mean(axis=1))
    clips, whence = goal.production()
    usd = clips * best.usd_per_clip
    unit = {"min_cost_per_clip": "cost per clip", "max_throughput": "clips per node-hour",
            "min_latency": "latency (priced as the same share of the production's cost: an assumption)"}  # fmt: skip
    says = (f"value = the expected improvement in {unit[goal.objective]} where beyond the {margin:.0%} margin x "
            f"{clips:,.0f} production clips ({whence}) x ${best.usd_per_clip:.3f}/clip")  # fmt: skip
    return _Worth(usd, share, says)


def _not_worth(
    best: Candidate, p_beaten: float | None, unworthy: list[tuple[float, float, int]], cands: list[Candidate],
    worth: _Worth, margin: float,
) -> Decision:  # fmt: skip
    """A verified answer, and every measurement left would cost more than what it may find is worth: stop."""
    gain, usd, i = max(unworthy, key=lambda u: u[0] - u[1])
    top = cands[i]
    beaten = f"P(an unverified candidate beats it by more than {margin:.0%}) = {p_beaten:.1%}; " if p_beaten else ""
    return Decision(
        stop_reason=f"converged: {best.plan} on {best.offer.id} meets the goal ({best.evidence}); {beaten}nothing "
        f"left is worth its cost: the most valuable, {top.plan} on {top.offer.id}, is worth ${gain:,.2f} against "
        f"its ${usd:,.2f} ({len(unworthy)} such measurement(s); {worth.says})",
        stop_kind="converged", best=best.key, p_beaten=p_beaten, p_feasible=1.0,
    )  # fmt: skip


def _nothing_fits(
    state: SearchState, d: Draws, best: Candidate | None, p_beaten: float | None, p_any: float,
    skipped: int, late: int, ordered: bool,
) -> Decision:  # fmt: skip
    """No measurement fits what is left of the budget (or of the time to answer): stop, and say which."""
    goal = state.goal
    reason = (f"budget reached: ${state.spent_usd:.2f} of ${goal.budget_usd:g} spent and the next of "
              f"{max(skipped, 1)} candidate measurement(s) would not fit in what is left")  # fmt: skip
    stop: StopKind = "budget"
    if late and not skipped:
        stop = "deadline"
        reason = (f"time to answer reached: {state.elapsed_s / 3600:.2f} h of "
                  f"{(goal.answer_within_s or 0) / 3600:g} h used and the next of {late} candidate measurement(s) "
                  "would end after it")  # fmt: skip
    if not ordered:
        reason = "nothing left worth measuring, yet no candidate is verified"
    return Decision(stop_reason=reason, stop_kind=stop, best=best.key if best else None,
                       p_beaten=p_beaten, p_feasible=p_any, nearest=nearest_options(state, d))  # fmt: skip


def _why(
    state: SearchState, d: Draws, i: int, why: str, ei: np.ndarray, value: np.ndarray, p_best: np.ndarray,
    best: Candidate | None, kind: str, requests: int, p_stop: float | None = None, margin: float = 0.03,
) -> str:  # fmt: skip
    """What the event log says: the value, the chance it is the optimum, what it would teach and could change."""
    cand = d.cands[i]
    if why == "retry":
        last = next(r.reason for r in reversed(state.rejected) if r.key == cand.key)
        return f"retry on a fresh deployment: the last measurement was not evidence ({last})"
    a = d.assessed[i]
    post = state.posterior(cand.gpu)
    learns = belief.informs(post, np.asarray(a.grad_latency), max(a.own_sigma, 1e-3)) if kind == "probe" else []
    against = "the best verified by the margin" if best is not None else "the plan it would verify now by the margin"
    if best is None and p_stop is None:
        against = "the best predicted"
    text = (f"predicted {_fmt(state.goal, cand)} (±{cand.sigma:.1%}), P(feasible) "
            f"{float(d.feasible[i].mean()):.0%}, P(optimum) {p_best[i]:.0%}; expected improvement over {against} "
            f"{ei[i]:.1%} of the objective, {value[i]:.1%} with what it tells about the others")  # fmt: skip
    if why == "likeliest optimum" and best is None and p_stop is not None:
        text = (f"the likeliest optimum, pinned by its probe: verified, P(no open candidate beats it by more than "
                f"{margin:.0%}) = {p_stop:.0%}, so a full run of {requests} requests most likely ends the search; "
                + text)  # fmt: skip
    elif why == "likeliest optimum":
        text = f"the likeliest optimum, pinned by its probe: a full run of {requests} requests verifies it; " + text
    elif why == "could displace the likeliest optimum":
        text = ("probed before the likeliest optimum's full run: the chance it beats that plan by more than the "
                "margin, times the full run's cost, is more than this probe costs; " + text)  # fmt: skip
    if learns:
        text += "; would narrow " + ", ".join(learns)
    if best is not None:
        text += f"; could replace {best.plan} on {best.offer.id} ({_fmt(state.goal, best)})"
    return text


def _fmt(goal: Goal, cand: Candidate) -> str:
    if goal.objective == "min_cost_per_clip":
        return f"${cand.usd_per_clip:.3f}/clip"
    if goal.objective == "min_latency":
        return f"p{goal.latency_percentile} {cand.latency_q_s:.1f} s"
    return f"{cand.clips_per_hour_per_node:.1f} clips/h/node"
