"""The search's belief about every candidate: candidates are offers x valid plans (each plan fixes the replica
layout on the node) x capacity, with the number of nodes a throughput floor needs; each is assessed under the
posterior (its prediction, its uncertainty, its sensitivities), judged against the goal, and costed (probe, full
run, start on a new or a held node). The words it works in are in policies/search/words.py (re-exported here).

policies/search/__init__.py is the search's one entry (the agent imports only it); evidence.py, acquisition.py, nodes.py
and forecast.py build on this module, and this module on none of them.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from typing import NamedTuple

import numpy as np

from worldtune.policies import belief, belief_noise, perf_model
from worldtune.policies.calibration import UNMEASURED_FAMILY_SD, plan_families, shipped_profile, unmeasured_families
from worldtune.policies.search.words import (
    CONFIDENCE,
    FULL_REQUESTS,
    MAX_NODES,
    OPTIMISM_Z,
    PROBE_REPEATS,
    PROBE_WARMUP,
    ActionKind,
    Assessed,
    Candidate,
    CandidateKey,
    Measurement,
    ModeShift,
    SearchState,
    offer_of,
    probe_steps,
)
from worldtune.tools.words import plan_rules, stats
from worldtune.tools.words.goal import Goal
from worldtune.tools.words.gpus import get_gpu
from worldtune.tools.words.offer import Offer
from worldtune.tools.words.plan import Plan
from worldtune.tools.words.profile import Profile
from worldtune.tools.words.workload import Workload


# ---- candidates ------------------------------------------------------------------------------------
def initial_state(
    goal: Goal, offers: Iterable[Offer], include_fp8: bool = False, priors: dict[str, Profile] | None = None
) -> SearchState:
    """The search's starting point: the goal, the offers it may rent, and the shipped profiles as the prior."""
    usable = [
        o
        for o in offers
        if o.gpu in goal.gpus
        and o.capacity in goal.capacities
        and (not goal.infras or o.infra in goal.infras)
        and o.gpu_count <= goal.max_gpus_per_node
    ]
    profiles = {gpu: (priors or {}).get(gpu) or shipped_profile(gpu) for gpu in goal.gpus}
    return SearchState(
        goal=goal, offers=_cheapest_per_shape(usable), beliefs=profiles, priors=profiles, include_fp8=include_fp8
    )


def _cheapest_per_shape(offers: list[Offer]) -> list[Offer]:
    """One offer per (GPU, count, capacity): the same hardware performs the same, so only price differs."""
    best: dict[tuple[str, int, str], Offer] = {}
    for offer in sorted(offers, key=lambda o: (o.usd_per_hour, o.infra, o.region)):
        best.setdefault((offer.gpu, offer.gpu_count, offer.capacity), offer)
    return sorted(best.values(), key=lambda o: (o.gpu, o.gpu_count, o.capacity))


def candidate_key(offer: Offer, plan: str) -> str:
    return f"{offer.id}|{plan}"


def hardware_key(key: str) -> str:
    """What a measurement depends on: GPU type and count and the plan, not the price or the capacity."""
    offer_id, plan = key.split("|", 1)
    shape = next(part for part in offer_id.split("/") if ":" in part)
    return f"{shape}|{plan}"


@functools.lru_cache(maxsize=256)
def _valid_plans(
    gpu: str, gpu_count: int, include_fp8: bool, workload_json: str, profile_json: str
) -> tuple[Plan, ...]:
    """Plans vLLM-Omni accepts here; memory terms are not learnt, so the prior profile decides (cached)."""
    spec = get_gpu(gpu)
    workload = Workload.model_validate_json(workload_json)
    profile = Profile.model_validate_json(profile_json)
    return tuple(
        p
        for p in plan_rules.candidate_plans(gpu_count, spec.max_gpus_per_node, include_fp8=include_fp8)
        if plan_rules.check(p, workload, spec, profile, gpu_count, suggest=False).valid
    )


def _plans_for(state: SearchState, gpu: str, gpu_count: int) -> list[Plan]:
    prior = state.prior(gpu)
    plans = _valid_plans(
        gpu, gpu_count, state.include_fp8, state.goal.workload.model_dump_json(), prior.model_dump_json()
    )
    return list(plans)


class _Modes:
    """A posterior's modes as one assessment reads them for every plan: each mode's posterior, its covariance as an
    array and the weights (built once per GPU type, not once per plan: a mode's covariance is 28 x 28 floats)."""

    def __init__(self, post: belief.Posterior) -> None:
        modes = post.modes()
        self.posteriors = [post.at(m) for m in modes]
        self.covs = [np.asarray(m.cov) for m in modes]
        self.weights = np.asarray([m.weight for m in modes])
        self.model_error = post.model_error


def _mixture_sd(modes: _Modes, preds: list[belief.Predictive]) -> float:
    """Relative sd of a plan's latency over every mode: within-mode variance plus the spread of the modes' means."""
    means = np.asarray([p.log_latency for p in preds])
    variances = np.asarray([p.sd(cov, modes.model_error) ** 2 for p, cov in zip(preds, modes.covs, strict=True)])
    w = modes.weights
    mean = float(w @ means)
    return math.sqrt(max(float(w @ (variances + (means - mean) ** 2)), 0.0))


def _run_families(state: SearchState) -> dict[str, set[str]]:
    """Per GPU type, the plan families this run has measured (calibration.plan_families of each measured plan)."""
    out: dict[str, set[str]] = {}
    for m in state.measurements:
        key = CandidateKey.of(m.key)
        out.setdefault(key.gpu, set()).update(plan_families(key.plan))
    return out


def family_sd(gpu: str, plan: Plan, measured_here: set[str]) -> float:
    """The model's extra relative sd for a plan of a family with no published cell on this GPU type and none
    measured by this run (issue 37 item 6): the spread leave-family-out shows for such families."""
    unmeasured = [f for f in unmeasured_families(gpu, plan) if f not in measured_here]
    return UNMEASURED_FAMILY_SD if unmeasured else 0.0


def assess(state: SearchState) -> list[Assessed]:
    """Every candidate under the posterior, best first (feasible ones first), with its sensitivities."""
    goal = state.goal
    measured = _by_key(state)
    here = _run_families(state)
    cache: dict[tuple[str, str], list[belief.Predictive]] = {}
    out: list[Assessed] = []
    by_gpu: dict[str, tuple[belief.Posterior, _Modes]] = {}
    starts = {gpu: start_factor(state, gpu) for gpu in {o.gpu for o in state.offers}}
    for offer in state.offers:
        if offer.gpu not in by_gpu:
            post = state.posterior(offer.gpu)
            by_gpu[offer.gpu] = (post, _Modes(post))
        (post, modes), prior = by_gpu[offer.gpu], state.beliefs[offer.gpu]
        for plan in _plans_for(state, offer.gpu, offer.gpu_count):
            key = candidate_key(offer, str(plan))
            preds = cache.get((offer.gpu, str(plan)))
            if preds is None:
                preds = [belief.predictive(at, prior, goal.workload, plan) for at in modes.posteriors]
                cache[(offer.gpu, str(plan))] = preds
            main = preds[0]
            extra = family_sd(offer.gpu, plan, here.get(offer.gpu, set()))
            sigma = math.hypot(_mixture_sd(modes, preds), extra)
            cand = _candidate(goal, offer, main.prediction, prior, sigma, key, starts[offer.gpu])
            cand = _with_measurements(goal, cand, measured.get(hardware_key(key), []), prior)
            if cand.stage == "predicted":
                shifts = [
                    ModeShift(
                        d_latency=p.log_latency - main.log_latency,
                        d_service=p.log_service - main.log_service,
                        grad_latency=p.grad_latency.tolist(),
                        grad_service=p.grad_service.tolist(),
                    )
                    for p in preds[1:]
                ]
                out.append(
                    Assessed(
                        cand=cand,
                        grad_latency=main.grad_latency.tolist(),
                        grad_service=main.grad_service.tolist(),
                        own_sigma=math.hypot(post.model_error, extra),
                        modes=shifts,
                    )
                )
            else:  # its own measurement pins it: no parameter moves it any more
                zero = [0.0] * len(post.names)
                pinned = [ModeShift(d_latency=0.0, d_service=0.0, grad_latency=zero, grad_service=zero)] * (
                    len(preds) - 1
                )
                out.append(
                    Assessed(cand=cand, grad_latency=zero, grad_service=zero, own_sigma=cand.sigma, modes=pinned)
                )
    return sorted(out, key=lambda a: (not a.cand.feasible, objective_value(goal, a.cand), a.cand.key))


def candidate_for(state: SearchState, key: str) -> Candidate:
    """One candidate's prediction (before its own measurements), without ranking all of them."""
    offer_id, plan = CandidateKey.of(key)
    offer = next((o for o in state.offers if o.id == offer_id), None)
    if offer is None or str(plan) not in {str(p) for p in _plans_for(state, offer.gpu, offer.gpu_count)}:
        raise KeyError(f"unknown candidate {key}")
    post, prior = state.posterior(offer.gpu), state.beliefs[offer.gpu]
    pred = belief.predictive(post, prior, state.goal.workload, plan)
    extra = family_sd(offer.gpu, plan, _run_families(state).get(offer.gpu, set()))
    sigma = math.hypot(pred.sd(np.asarray(post.cov), post.model_error), extra)
    beliefs = state.beliefs[offer.gpu]
    return _candidate(state.goal, offer, pred.prediction, beliefs, sigma, key, start_factor(state, offer.gpu))


def candidates(state: SearchState) -> list[Candidate]:
    """Every candidate with its prediction under the current belief, best first (feasible ones first)."""
    return [a.cand for a in assess(state)]


def _candidate(
    goal: Goal, offer: Offer, p: perf_model.Prediction, profile: Profile, sigma: float, key: str, starts: float = 1.0
) -> Candidate:
    # the percentile of one request's latency: the noise as the belief holds it (prior, or learned from the samples),
    # Student-t with its degrees of freedom, so a barely known noise widens the claim
    noise = belief_noise.prior(profile)
    latency_q = p.latency_s * (1 + noise.quantile(goal.latency_percentile) * noise.cv)
    nodes = 1
    if goal.throughput_floor_clips_per_hour:
        nodes = max(1, math.ceil(goal.throughput_floor_clips_per_hour / p.clips_per_hour_per_node))
    plan = key.split("|", 1)[1]
    cand = Candidate(
        key=key,
        gpu=offer.gpu,
        plan=plan,
        offer=offer,
        nodes=nodes,
        latency_s=p.latency_s,
        latency_q_s=latency_q,
        per_step_s=p.per_step_s,
        fixed_s=p.fixed_s,
        steps=goal.workload.steps,
        overhead_s=p.guardrail_s + p.client_overhead_s,
        load_s=p.load_s,
        cold_load_s=p.cold_load_s,
        clips_per_hour_per_node=p.clips_per_hour_per_node,
        usd_per_clip=offer.usd_per_clip(p.clips_per_hour_per_node),
        memory_gib_per_gpu=p.memory_gib_per_gpu,
        sigma=sigma,
        start_factor=starts,
        feasible=True,
    )
    return _judge(goal, cand)


def _judge(goal: Goal, cand: Candidate) -> Candidate:
    violations: list[str] = []
    if goal.latency_bound_s is not None and cand.latency_q_s > goal.latency_bound_s:
        violations.append(
            f"p{goal.latency_percentile} {cand.latency_q_s:.1f} s exceeds the bound {goal.latency_bound_s:g} s"
        )
    if cand.nodes > MAX_NODES:
        violations.append(f"needs {cand.nodes} nodes for the throughput floor (at most {MAX_NODES})")
    return cand.model_copy(update={"feasible": not violations, "violations": violations})


def _with_measurements(goal: Goal, cand: Candidate, found: list[Measurement], profile: Profile) -> Candidate:
    """Replace predictions by what was measured (a full run's latencies, or a probe's affine fit)."""
    full = [m for m in found if m.kind == "full" and m.latencies_s]
    probe = [m for m in found if m.kind == "probe" and m.per_step_s is not None]
    if full:
        latencies = [x for m in full for x in m.latencies_s]
        p50 = float(np.median(latencies))
        cph = next((m.clips_per_hour_per_node for m in reversed(full) if m.clips_per_hour_per_node), None)
        cph = cph or cand.clips_per_hour_per_node * cand.latency_s / p50
        nodes = cand.nodes
        if goal.throughput_floor_clips_per_hour:
            nodes = max(1, math.ceil(goal.throughput_floor_clips_per_hour / cph))
        bound, evidence = stats.percentile_verdict(latencies, goal.latency_percentile, goal.confidence).bound()
        if goal.latency_bound_s is not None:  # a run stopped once decided: the claim can no longer hold
            check = stats.check_claim(latencies, goal.latency_percentile, goal.confidence, goal.latency_bound_s)
            if check.state == "failed":  # the claim's order statistic is at least the (allowed+1)-th largest
                bound, evidence = sorted(latencies)[-(check.allowed_above + 1)], check.reason
        updated = cand.model_copy(
            update={
                "latency_s": p50,
                "latency_q_s": bound if bound is not None else math.inf,
                "clips_per_hour_per_node": cph,
                "usd_per_clip": cand.offer.usd_per_clip(cph),
                "nodes": nodes,
                "sigma": 0.0,
                "stage": "measured",
                "evidence": evidence,
            }
        )
        return _judge(goal, updated)
    if probe:
        m = probe[-1]
        assert m.per_step_s is not None and m.fixed_s is not None
        # keep the model's guardrail and client overhead, which probes do not separate
        latency = m.fixed_s + goal.workload.steps * m.per_step_s + cand.overhead_s
        # the probe's extrapolation and the posterior's prediction, each by its precision: where the noise is small
        # the probe decides, where it is large (learned from the samples) the model pinned by full runs does
        sigma = probe_sigma(goal, m, profile)
        if latency > 0 and cand.sigma > 0:
            w_probe, w_model = sigma**-2, cand.sigma**-2
            latency = math.exp((w_probe * math.log(latency) + w_model * math.log(cand.latency_s)) / (w_probe + w_model))
            sigma = (w_probe + w_model) ** -0.5
        scale = latency / cand.latency_s
        cph = cand.clips_per_hour_per_node / scale
        nodes = cand.nodes
        if goal.throughput_floor_clips_per_hour:
            nodes = max(1, math.ceil(goal.throughput_floor_clips_per_hour / cph))
        updated = cand.model_copy(
            update={
                "latency_s": latency,
                "latency_q_s": cand.latency_q_s * scale,
                "per_step_s": m.per_step_s,
                "fixed_s": m.fixed_s,
                "clips_per_hour_per_node": cph,
                "usd_per_clip": cand.offer.usd_per_clip(cph),
                "nodes": nodes,
                "sigma": sigma,
                "stage": "probed",
            }
        )
        return _judge(goal, updated)
    return cand


class FitNoise(NamedTuple):
    """Relative one-sigmas of what a probe's two-point fit gives: the latency at the goal's steps, the per-step
    slope and the fixed intercept."""

    latency: float
    per_step: float
    fixed: float


def fit_noise(m: Measurement, steps: int, cv: float) -> FitNoise:
    """The noise of a probe's fit of latency = fixed + steps x per_step through the means of its two step counts
    (the measurement's own, else probe_steps(steps)), each of `m.repeats` requests whose noise is `cv` of their
    latency: the slope is their difference over the span, the intercept and the latency at `steps` weigh the two
    means by their distances (read at a step count asked, it is that count's mean)."""
    assert m.per_step_s is not None and m.fixed_s is not None
    asked = sorted({s for s, _ in m.probe_points})
    lo, hi = (asked[0], asked[-1]) if len(asked) > 1 else probe_steps(steps)
    span = hi - lo
    root = math.sqrt(max(1, m.repeats))
    sd_lo, sd_hi = (cv * (m.fixed_s + s * m.per_step_s) / root for s in (lo, hi))
    w_hi = (steps - lo) / span  # latency(steps) = (1 - w_hi) mean(lo) + w_hi mean(hi)
    latency = m.fixed_s + steps * m.per_step_s
    floor = 0.0005
    return FitNoise(
        latency=max(math.hypot((1 - w_hi) * sd_lo, w_hi * sd_hi) / max(latency, 1e-9), floor),
        per_step=max(math.hypot(sd_lo, sd_hi) / span / max(m.per_step_s, 1e-9), floor),
        fixed=max(math.hypot(hi * sd_lo, lo * sd_hi) / span / max(m.fixed_s, 1e-9), floor),
    )


def probe_sigma(goal: Goal, m: Measurement, profile: Profile) -> float:
    """Relative one-sigma of the latency at the goal's steps a probe gives (fit_noise, the profile's noise)."""
    return fit_noise(m, goal.workload.steps, profile.noise_cv).latency


def objective_value(goal: Goal, cand: Candidate) -> float:
    """Smaller is better: $/clip, latency at the goal's percentile, or minus clips/hour per node."""
    if goal.objective == "min_cost_per_clip":
        return cand.usd_per_clip
    if goal.objective == "min_latency":
        return cand.latency_q_s
    return -cand.clips_per_hour_per_node


def optimistic_value(goal: Goal, cand: Candidate) -> float:
    """The best the candidate could plausibly be (its prediction moved z sigmas in its favour)."""
    value = objective_value(goal, cand)
    factor = math.exp(-OPTIMISM_Z * cand.sigma)
    return value * factor if value > 0 else value / factor


def could_be_feasible(goal: Goal, cand: Candidate) -> bool:
    if cand.feasible:
        return True
    if goal.latency_bound_s is None or cand.stage == "measured":
        return False
    return cand.latency_q_s * math.exp(-OPTIMISM_Z * cand.sigma) <= goal.latency_bound_s and cand.nodes <= MAX_NODES


def tolerance_bound(values: list[float], percentile: int, confidence: float = CONFIDENCE) -> float:
    """The named parametric bound (stats.normal_tolerance_upper, assumes normal latencies); one sample: inf."""
    bound = stats.normal_tolerance_upper(values, percentile / 100.0, confidence)
    return math.inf if bound is None else bound


def _by_key(state: SearchState) -> dict[str, list[Measurement]]:
    """Measurements by hardware key: a spot node measures the same as the on-demand node of its shape."""
    out: dict[str, list[Measurement]] = {}
    for m in state.measurements:
        out.setdefault(hardware_key(m.key), []).append(m)
    return out


# ---- costs -----------------------------------------------------------------------------------------
def full_requests(goal: Goal) -> int:
    """Requests a full run takes: what an order-statistic claim of the goal's percentile needs at the goal's
    confidence (P95: 59 at 95%, 90 at 99%)."""
    return max(FULL_REQUESTS, stats.samples_needed(goal.latency_percentile / 100.0, goal.confidence))


def probe_seconds(cand: Candidate, steps: Iterable[int] | None = None, repeats: int = PROBE_REPEATS) -> float:
    """Model-seconds the probes take after a deployment is ready, on the client's clock: the warm-up request at the
    smallest step count, then `repeats` requests per step count (probe_steps of the goal's), each with its
    overhead."""
    steps = list(probe_steps(cand.steps) if steps is None else steps)
    one = cand.fixed_s + cand.overhead_s
    warmup = PROBE_WARMUP * (one + min(steps) * cand.per_step_s) if steps else 0.0
    return warmup + repeats * sum(one + s * cand.per_step_s for s in steps)


def full_seconds(cand: Candidate, requests: int = FULL_REQUESTS) -> float:
    """Model-seconds of a full run: `requests` anchor clips spread over the node's replicas."""
    replicas = cand.plan.replicas
    rounds = math.ceil(requests / replicas)
    return rounds * cand.latency_s


def start_seconds(cand: Candidate, deployed: bool, node_held: bool = False) -> float:
    """Model-seconds before the first request: nothing on its own live deployment; a warm load of its plan on a
    node already held (replan); else the offer's provisioning and a cold load (the first load on a new node). As
    believed, times what this run's own starts on the GPU type measured against the belief (`start_factor`)."""
    if deployed:
        return 0.0
    return believed_start_s(cand, node_held) * cand.start_factor


def believed_start_s(cand: Candidate, node_held: bool = False) -> float:
    """The belief's start of a node for the candidate (no run's measurement in it): a warm load on a node held, else
    the offer's provisioning and a cold load."""
    if node_held:
        return cand.load_s
    return cand.offer.provision_s + (cand.cold_load_s or cand.load_s)


START_TOLERANCE = 0.15  # measured starts within 15% of the belief's (geometric mean) leave it as believed


def start_factor(state: SearchState, gpu: str) -> float:
    """The run's own starts on `gpu` over what the belief predicted for them (issue 39 item 4: a cold load of 2,372 s
    against a believed 623 s once priced a claim's six lanes on the belief): the geometric mean of measured over
    predicted, 1 while none is measured or they agree within START_TOLERANCE. Lanes, spares and every start the
    search prices use it (start_seconds)."""
    ratios = [
        m.start_s / m.start_predicted_s
        for m in state.measurements
        if m.start_s is not None and m.start_predicted_s and hardware_key(m.key).split(":", 1)[0] == gpu
    ]
    if not ratios:
        return 1.0
    factor = math.exp(sum(math.log(max(r, 1e-6)) for r in ratios) / len(ratios))
    return factor if abs(math.log(factor)) > math.log1p(START_TOLERANCE) else 1.0


def action_cost(
    cand: Candidate,
    kind: ActionKind,
    deployed: bool,
    safety: float = 1.25,
    requests: int = FULL_REQUESTS,
    node_held: bool = False,
) -> tuple[float, float]:
    """(expected seconds, expected USD) of one action on one node, provisioning and load included if needed."""
    seconds = probe_seconds(cand) if kind == "probe" else full_seconds(cand, requests)
    seconds += start_seconds(cand, deployed, node_held)
    seconds *= safety
    return seconds, cand.offer.usd_per_hour * seconds / 3600.0


def best_verified(state: SearchState, ranked: list[Candidate] | None = None) -> Candidate | None:
    """The best fully measured candidate that meets the constraints (by its percentile claim or named bound)."""
    ranked = ranked if ranked is not None else candidates(state)
    done = [c for c in ranked if c.stage == "measured" and c.feasible and c.key not in state.failed]
    return min(done, key=lambda c: objective_value(state.goal, c)) if done else None


def recommendation(state: SearchState) -> Candidate | None:
    """What the search recommends now: the best verified candidate, else None."""
    return best_verified(state)


def held_offers(state: SearchState) -> set[str]:
    """Offer ids of the nodes the search holds now (one per live deployment); none when it does not reuse them."""
    return {offer_of(key) for key in state.deployed} if state.reuse_nodes else set()
