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
(P(no open candidate beats it by the margin)). Either way, an unprobed candidate goes first when that is expected
to cost less than the full run now (choose.worth_first: the probe and the run after it, later by the probe's time
and so perhaps in more lanes, against the run now and, with P(it beats the run's plan by the margin), its own probe
and full run after it), so the claim's requests are not spent on a plan the next probes displace.
Otherwise the best value per net dollar is probed (a probe is also the probe its own full run will need, so
P(it is the optimum) x that later probe is spared), which is how a plan whose only use is to tell two hypotheses
apart gets chosen, and how, of near-equal values, the likeliest optimum's probe comes first. Which of these a
decision buys, priced, is choose.py's.
"""

from __future__ import annotations

import math

import numpy as np

from worldtune.policies.search.candidates import (
    assess,
    best_verified,
    objective_value,
)
from worldtune.policies.search.choose import Worth, choose, ready_for_full
from worldtune.policies.search.draws import DRAWS, Draws, draws, nearest_options, p_stop_if_verified
from worldtune.policies.search.words import (
    STOP_LEVEL,
    Candidate,
    Decision,
    SearchState,
)
from worldtune.tools.words.goal import Goal


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
        return Decision(
            stop_reason=f"iteration cap reached ({max_iterations} measurements): a last resort, not a verdict",
            stop_kind="iteration_cap",
            best=best_key,
            p_feasible=p_any,
        )
    open_ = np.asarray([c.stage != "measured" and c.key not in state.failed for c in ranked])
    if best is None and p_any < STOP_LEVEL:
        nearest = nearest_options(state, d)
        near = "; ".join(
            f"{o.plan} on {o.gpu}: p{goal.latency_percentile} ~{o.latency_q_s:.1f} s, meets "
            f"{o.would_meet_s:.1f} s at 95%, ${o.usd_per_clip:.3f}/clip"
            for o in nearest
        )
        return Decision(
            stop_reason=f"infeasible: P(any candidate meets the constraints) = {p_any:.1%} < {STOP_LEVEL:.0%} "
            f"under the posterior; nearest: {near}",
            stop_kind="infeasible",
            p_feasible=p_any,
            nearest=nearest,
        )
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
                stop_kind="converged",
                best=best_key,
                p_beaten=p_beaten,
                p_feasible=1.0,
            )
        reference = np.full(d.objective.shape[1], threshold)
        lead = None
    else:
        p_beaten = None
        lead, reference = _unverified_reference(state, d, ranked, open_, margin)
    ei, value = _values(d, goal, reference, open_)
    if best is not None:
        worth = _production_value(goal, best, d, open_, margin)
    else:  # what a second measurement bought beside the first is worth, against the plan in view
        view = _in_view(d, open_, lead)
        worth = None if view is None else _production_value(goal, ranked[view], d, open_, margin, drawn=view)
    return choose(state, d, ei, value, open_, best, parallel, p_beaten, p_any, margin, lead, worth)


def _unverified_reference(
    state: SearchState, d: Draws, ranked: list[Candidate], open_: np.ndarray, margin: float
) -> tuple[tuple[int, float] | None, np.ndarray]:
    """Before anything is verified: the plan the search would verify now (the probed, likely feasible candidate
    whose verification most likely ends the search) with that chance, and what improvement is measured against:
    that plan's value less the margin; with nothing probed, the best predicted mean among the likely feasible;
    with none likely feasible, the dearest candidate (being feasible is then what counts)."""
    n = d.objective.shape[1]
    ready = ready_for_full(state, ranked)
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


def _in_view(d: Draws, open_: np.ndarray, lead: tuple[int, float] | None) -> int | None:
    """Before anything is verified, the plan the search has in view: the one it would verify now (`lead`), else the
    likely feasible candidate of the best predicted mean; None when none is likely feasible."""
    if lead is not None:
        return lead[0]
    likely = [i for i in range(len(d.cands)) if open_[i] and float(d.feasible[i].mean()) >= 0.5]
    return min(likely, key=lambda i: float(np.mean(d.objective[i])), default=None)


def _production_value(
    goal: Goal, best: Candidate, d: Draws, open_: np.ndarray, margin: float, drawn: int | None = None
) -> Worth | None:
    """Once an answer is verified, a measurement is bought only when what it may find is worth more than it costs:
    the objective's expected improvement over the answer beyond the margin (a plan within the margin is no better
    an answer, so only what a plan gains past it counts: 10% better is worth 7% at a 3% margin), plus the share
    of the others' it would resolve (rho^2, as _values), times the production's cost. Before (`best` the plan in
    view, index `drawn` in the draws), finding any verified answer is what a decision's first measurement is for,
    and the probabilities decide it alone; a second one bought beside it (--parallel) must be worth its cost by
    what it may find itself against the plan in view (drawn as the others are: where every plan is faster, so is
    that one); what it would tell about the others, the first one tells too (their draws move together)."""
    if best.usd_per_clip <= 0 or not math.isfinite(best.usd_per_clip):
        return None
    verified = drawn is None
    # unverified, draw by draw: in a draw where every plan is faster, so is the plan in view
    value_best = objective_value(goal, best) if verified else d.objective[drawn][None, :]
    size = np.maximum(np.abs(value_best), 1e-12)
    better = d.feasible & (d.objective < value_best - margin * size) & open_[:, None]
    gain = np.where(better, value_best - margin * size - d.objective, 0.0) / size
    own = gain.mean(axis=1)
    share = _with_others(d, own) if verified else own
    clips, whence = goal.production()
    usd = clips * best.usd_per_clip
    unit = {
        "min_cost_per_clip": "cost per clip",
        "max_throughput": "clips per node-hour",
        "min_latency": "latency (priced as the same share of the production's cost: an assumption)",
    }
    over = "" if verified else f" over {best.plan}, drawn as the others are (nothing verified yet)"
    says = (
        f"value = the expected improvement in {unit[goal.objective]}{over} beyond the {margin:.0%} margin x "
        f"{clips:,.0f} production clips ({whence}) x ${best.usd_per_clip:.3f}/clip"
    )
    return Worth(usd, share, says, gain if verified else None, d.objective if verified else None)
