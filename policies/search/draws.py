"""Posterior draws of every candidate's objective and feasibility, the search's decisions are made from.

Draws of every GPU type's parameters (Gaussian in the belief's coordinates, a mode by its weight) move each
candidate's log latency and log service time through its sensitivities, plus an independent error of its own
(the model's, or its probe's); measured candidates keep their measured values. Seeded by the state, so a
decision is reproducible.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from worldtune.policies.search.candidates import hardware_key
from worldtune.policies.search.words import MAX_NODES, Assessed, Candidate, NearestOption, SearchState

DRAWS = 512


@dataclass
class Draws:
    """Objective values and feasibility of every candidate in every posterior draw (candidates x draws)."""

    assessed: list[Assessed]
    objective: np.ndarray
    feasible: np.ndarray
    log_latency: np.ndarray  # the draw's deviation in log latency (for correlations)

    @property
    def cands(self) -> list[Candidate]:
        return [a.cand for a in self.assessed]


def draws(state: SearchState, assessed: list[Assessed], n: int = DRAWS) -> Draws:
    """Posterior draws of every candidate's objective and feasibility (seeded by the state: reproducible)."""
    goal = state.goal
    rng = np.random.default_rng(1000 + state.iterations)
    # per GPU type: which mode each draw comes from, and each mode's parameter shifts (its Laplace Gaussian)
    picks: dict[str, np.ndarray] = {}
    shifts: dict[str, list[np.ndarray]] = {}
    for gpu in sorted({a.cand.gpu for a in assessed}):
        post = state.posterior(gpu)
        modes = post.modes()
        weights = np.asarray([m.weight for m in modes])
        picks[gpu] = rng.choice(len(modes), size=n, p=weights / weights.sum())
        shifts[gpu] = []
        for m in modes:
            cov = np.asarray(m.cov)
            w, v = np.linalg.eigh((cov + cov.T) / 2)
            shifts[gpu].append((v * np.sqrt(np.clip(w, 0.0, None))) @ rng.standard_normal((len(w), n)))
    own: dict[str, np.ndarray] = {}  # one error per hardware key: the same plan on another offer is the same plan
    c = len(assessed)
    d_lat, d_svc = np.zeros((c, n)), np.zeros((c, n))
    for i, a in enumerate(assessed):
        hw = hardware_key(a.cand.key)
        if hw not in own:
            own[hw] = rng.standard_normal(n)
        eps = a.own_sigma * own[hw] if a.cand.stage != "measured" else np.zeros(n)
        gpu = a.cand.gpu
        layers = [(0.0, 0.0, a.grad_latency, a.grad_service)]
        layers += [(s.d_latency, s.d_service, s.grad_latency, s.grad_service) for s in a.modes]
        for k, (off_l, off_s, g_l, g_s) in enumerate(layers):
            mask = picks[gpu] == k
            if mask.any():
                d_lat[i, mask] = off_l + (np.asarray(g_l) @ shifts[gpu][k])[mask]
                d_svc[i, mask] = off_s + (np.asarray(g_s) @ shifts[gpu][k])[mask]
        d_lat[i] += eps
        d_svc[i] += eps
    lat_q = np.asarray([a.cand.latency_q_s for a in assessed])[:, None] * np.exp(d_lat)
    cph = np.asarray([a.cand.clips_per_hour_per_node for a in assessed])[:, None] * np.exp(-d_svc)
    usd = np.asarray([a.cand.usd_per_clip for a in assessed])[:, None] * np.exp(d_svc)
    objective = {"min_cost_per_clip": usd, "min_latency": lat_q}.get(goal.objective, -cph)
    feasible = np.ones((c, n), dtype=bool)
    if goal.latency_bound_s is not None:
        feasible &= lat_q <= goal.latency_bound_s
    if goal.throughput_floor_clips_per_hour:
        feasible &= cph * MAX_NODES >= goal.throughput_floor_clips_per_hour
    for i, a in enumerate(assessed):
        if a.cand.stage == "measured" or a.cand.key in state.failed:
            feasible[i] = a.cand.feasible and a.cand.key not in state.failed
    return Draws(assessed, objective, feasible, d_lat)


def nearest_options(state: SearchState, d: Draws, top: int = 3) -> list[NearestOption]:
    """The fastest candidates at the goal's percentile: what they reach, the bound they would meet, their cost."""
    lat_q = np.asarray([a.cand.latency_q_s for a in d.assessed])[:, None] * np.exp(d.log_latency)
    order = np.argsort(np.median(lat_q, axis=1))
    out: list[NearestOption] = []
    seen: set[str] = set()
    for i in order:
        cand = d.cands[i]
        if cand.key in state.failed or hardware_key(cand.key) in seen:
            continue
        seen.add(hardware_key(cand.key))
        out.append(
            NearestOption(
                key=cand.key,
                gpu=cand.gpu,
                plan=str(cand.plan),
                stage=cand.stage,
                latency_q_s=round(float(np.median(lat_q[i])), 2),
                would_meet_s=round(float(np.quantile(lat_q[i], 0.95)), 2),
                usd_per_clip=round(cand.usd_per_clip, 4),
            )
        )
        if len(out) >= top:
            break
    return out


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
