"""The search: which candidate to measure next, what the measurements teach, and when to stop.

Candidates are offers x valid plans (each plan fixes the replica layout on the node) x capacity, and
the number of nodes a throughput floor needs. The performance model ranks them under the goal's
constraints with the agent's current belief (one Profile per GPU type). Verification is cheap first:
short-step probes give per-step and fixed time (`StepObs`); only candidates that can still win get a
full anchor run (`LatencyObs`). After every measurement the belief is refitted with
`calibration.fit_profile` and the ranking is redone.

Stopping rule: the best fully measured candidate meets the latency bound with statistical confidence
(a one-sided normal tolerance bound on its percentile, scipy's noncentral t) and no unmeasured
candidate can beat it by more than `margin` even optimistically (prediction minus z x its model
uncertainty); or the budget or the iteration cap is reached. The decision says which.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Literal

from pydantic import BaseModel, Field

from worldtune.policies import perf_model
from worldtune.policies.calibration import LatencyObs, Observation, Prior, StepObs, fit_profile, shipped_profile
from worldtune.tools import plan_rules
from worldtune.tools.goal import Goal
from worldtune.tools.gpus import get_gpu
from worldtune.tools.offer import Offer
from worldtune.tools.plan import Plan
from worldtune.tools.profile import Profile

ActionKind = Literal["probe", "full"]
PROBE_STEPS: tuple[int, ...] = (4, 8)  # two short step counts fix latency = fixed + steps x per_step
FULL_REQUESTS = 5  # full anchor-step requests per verified candidate
CONFIDENCE = 0.95  # of the tolerance bound on a latency percentile
PRIOR_SIGMA = 0.10  # relative error of an unmeasured prediction before anything on its GPU type is measured
UNSEEN_FAMILY_SIGMA = 0.03  # a measured GPU type, but a communication mix nothing measured exercised
MIN_SIGMA = 0.015  # never trust the model more than this for a candidate nobody measured
PROBED_SIGMA = 0.01  # a probe fixes latency to the affine fit's accuracy (REFERENCE: within 0.3%)
OPTIMISM_Z = 1.645  # one-sided 95%
MAX_NODES = 64
# How far each fitted number may move from the shipped profile (log-space spread) when recalibrating.
RECALIBRATION_SPREAD = {
    "linear_tflops": 0.3,
    "attn_tflops": 0.3,
    "link_gbps": 0.7,
    "collective_latency_us": 1.0,
    "fixed_s": 0.5,
}


class Candidate(BaseModel):
    """One thing that could be recommended: an offer, a plan on its node, and how many such nodes."""

    key: str
    gpu: str
    plan: str
    offer: Offer
    nodes: int = 1
    latency_s: float = Field(description="predicted (or measured) p50 latency per clip")
    latency_q_s: float = Field(description="predicted latency at the goal's percentile")
    per_step_s: float
    fixed_s: float
    load_s: float
    clips_per_hour_per_node: float
    usd_per_clip: float
    memory_gib_per_gpu: float
    sigma: float = Field(description="relative uncertainty of the prediction")
    feasible: bool = Field(description="predicted to meet the goal's constraints")
    violations: list[str] = Field(default_factory=list)
    stage: Literal["predicted", "probed", "measured"] = "predicted"

    @property
    def replicas(self) -> int:
        return Plan.parse(self.plan).replicas * self.nodes

    @property
    def capacity(self) -> str:
        return self.offer.capacity


class Measurement(BaseModel):
    """What was measured on one candidate (probe: per-step and fixed; full: latencies and throughput)."""

    key: str
    kind: ActionKind
    per_step_s: float | None = None
    fixed_s: float | None = None
    latencies_s: list[float] = Field(default_factory=list)
    clips_per_hour_per_node: float | None = None
    usd: float = 0.0
    gpu_hours: float = 0.0
    benchmark_id: str = ""
    predicted_before: float | None = Field(default=None, description="what the belief predicted for this measure")


class Action(BaseModel):
    """One verification step the search asks for."""

    key: str
    kind: ActionKind
    expected_usd: float
    expected_s: float
    needs_deploy: bool
    reason: str


class Decision(BaseModel):
    """What to do next, or why to stop, and the best verified candidate so far."""

    actions: list[Action] = Field(default_factory=list)
    stop_reason: str | None = None
    stop_kind: Literal["converged", "budget", "iterations", "infeasible", "declined"] | None = None
    best: str | None = None


class SearchState(BaseModel):
    """Everything the search knows; JSON-serialisable so the agent can checkpoint it."""

    goal: Goal
    offers: list[Offer]
    beliefs: dict[str, Profile] = Field(description="GPU type -> the current calibrated profile")
    measurements: list[Measurement] = Field(default_factory=list)
    surprises: dict[str, list[float]] = Field(default_factory=dict, description="GPU -> |measured/predicted - 1|")
    deployed: list[str] = Field(default_factory=list, description="candidate keys with a live deployment")
    spent_usd: float = 0.0
    spent_gpu_hours: float = 0.0
    iterations: int = 0
    include_fp8: bool = False
    failed: list[str] = Field(default_factory=list, description="candidate keys whose deployment or benchmark failed")
    inconclusive: list[str] = Field(
        default_factory=list, description="candidate keys whose probes could not separate per-step from fixed time"
    )


# ---- candidates ------------------------------------------------------------------------------------
def initial_state(goal: Goal, offers: Iterable[Offer], include_fp8: bool = False) -> SearchState:
    """The search's starting point: the goal, the offers it may rent, and the shipped profiles as belief."""
    usable = [
        o
        for o in offers
        if o.gpu in goal.gpus
        and o.capacity in goal.capacities
        and (not goal.infras or o.infra in goal.infras)
        and o.gpu_count <= goal.max_gpus_per_node
    ]
    beliefs = {gpu: shipped_profile(gpu) for gpu in goal.gpus}
    return SearchState(goal=goal, offers=_cheapest_per_shape(usable), beliefs=beliefs, include_fp8=include_fp8)


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


def _plans_for(state: SearchState, gpu: str, gpu_count: int) -> list[Plan]:
    spec = get_gpu(gpu)
    profile = state.beliefs[gpu]
    return [
        p
        for p in plan_rules.candidate_plans(gpu_count, spec.max_gpus_per_node, include_fp8=state.include_fp8)
        if plan_rules.check(p, state.goal.workload, spec, profile, gpu_count, suggest=False).valid
    ]


def _z(percentile: int) -> float:
    from scipy.stats import norm

    return float(norm.ppf(percentile / 100.0))


def candidates(state: SearchState) -> list[Candidate]:
    """Every candidate with its prediction under the current belief, best first (feasible ones first)."""
    goal = state.goal
    measured = _by_key(state)
    out: list[Candidate] = []
    for offer in state.offers:
        profile = state.beliefs[offer.gpu]
        sigma_gpu = _gpu_sigma(state, offer.gpu)
        families = _measured_families(state, offer.gpu)
        for plan in _plans_for(state, offer.gpu, offer.gpu_count):
            key = candidate_key(offer, str(plan))
            p = perf_model.predict(goal.workload, plan, profile)
            sigma = sigma_gpu if not families or family(plan) in families else max(sigma_gpu, UNSEEN_FAMILY_SIGMA)
            cand = _candidate(goal, offer, plan, p, profile, sigma, key)
            out.append(_with_measurements(goal, cand, measured.get(hardware_key(key), []), profile))
    return sorted(out, key=lambda c: (not c.feasible, objective_value(goal, c), c.key))


def _candidate(
    goal: Goal, offer: Offer, plan: Plan, p: perf_model.Prediction, profile: Profile, sigma: float, key: str
) -> Candidate:
    latency_q = p.latency_s * (1 + _z(goal.latency_percentile) * profile.noise_cv)
    nodes = 1
    if goal.throughput_floor_clips_per_hour:
        nodes = max(1, math.ceil(goal.throughput_floor_clips_per_hour / p.clips_per_hour_per_node))
    cand = Candidate(
        key=key,
        gpu=offer.gpu,
        plan=str(plan),
        offer=offer,
        nodes=nodes,
        latency_s=p.latency_s,
        latency_q_s=latency_q,
        per_step_s=p.per_step_s,
        fixed_s=p.fixed_s,
        load_s=p.load_s,
        clips_per_hour_per_node=p.clips_per_hour_per_node,
        usd_per_clip=offer.usd_per_clip(p.clips_per_hour_per_node),
        memory_gib_per_gpu=p.memory_gib_per_gpu,
        sigma=sigma,
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
    """Replace predictions by what was measured (a probe's affine fit, or a full run's latencies)."""
    full = [m for m in found if m.kind == "full" and m.latencies_s]
    probe = [m for m in found if m.kind == "probe" and m.per_step_s is not None]
    if full:
        latencies = [x for m in full for x in m.latencies_s]
        p50 = _median(latencies)
        cph = next((m.clips_per_hour_per_node for m in reversed(full) if m.clips_per_hour_per_node), None)
        cph = cph or cand.clips_per_hour_per_node * cand.latency_s / p50
        nodes = cand.nodes
        if goal.throughput_floor_clips_per_hour:
            nodes = max(1, math.ceil(goal.throughput_floor_clips_per_hour / cph))
        updated = cand.model_copy(
            update={
                "latency_s": p50,
                "latency_q_s": tolerance_bound(latencies, goal.latency_percentile),
                "clips_per_hour_per_node": cph,
                "usd_per_clip": cand.offer.usd_per_clip(cph),
                "nodes": nodes,
                "sigma": 0.0,
                "stage": "measured",
            }
        )
        return _judge(goal, updated)
    if probe:
        m = probe[-1]
        assert m.per_step_s is not None and m.fixed_s is not None
        latency = (
            m.fixed_s
            + goal.workload.steps * m.per_step_s
            + cand.latency_s
            - cand.fixed_s
            - cand.per_step_s * (goal.workload.steps)
        )  # keep the model's guardrail term, which probes do not separate
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
                "sigma": PROBED_SIGMA,
                "stage": "probed",
            }
        )
        return _judge(goal, updated)
    return cand


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
    return value * (1 - OPTIMISM_Z * cand.sigma) if value > 0 else value * (1 + OPTIMISM_Z * cand.sigma)


def could_be_feasible(goal: Goal, cand: Candidate) -> bool:
    if cand.feasible:
        return True
    if goal.latency_bound_s is None or cand.stage == "measured":
        return False
    return cand.latency_q_s * (1 - OPTIMISM_Z * cand.sigma) <= goal.latency_bound_s and cand.nodes <= MAX_NODES


# ---- statistics ------------------------------------------------------------------------------------
def tolerance_bound(values: list[float], percentile: int, confidence: float = CONFIDENCE) -> float:
    """Upper bound on the `percentile` of a normal population from a sample, at `confidence` (one-sided).

    k = t'_{confidence}(n-1, z_p sqrt(n)) / sqrt(n) with the noncentral t (the standard tolerance factor).
    One sample gives no spread: its value is inflated by the twin's default noise to stay conservative.
    """
    from scipy.stats import nct, norm

    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean * (1 + 3 * 0.01)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    z = norm.ppf(percentile / 100.0)
    k = float(nct.ppf(confidence, n - 1, z * math.sqrt(n))) / math.sqrt(n)
    return mean + k * sd


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def family(plan: Plan) -> tuple[bool, ...]:
    """Which communication a plan does (TP, Ulysses, ring, HSDP, CFG, VAE patch): what a fit can only learn
    from a measurement that exercises it."""
    return (plan.tp > 1, plan.ulysses > 1, plan.ring > 1, plan.hsdp > 1, plan.cfg > 1, plan.vae > 1)


def _measured_families(state: SearchState, gpu: str) -> set[tuple[bool, ...]]:
    out = set()
    for m in state.measurements:
        shape, plan = hardware_key(m.key).split("|", 1)
        if shape.split(":")[0] == gpu:
            out.add(family(Plan.parse(plan)))
    return out


def _gpu_sigma(state: SearchState, gpu: str) -> float:
    """Model uncertainty on a GPU type: the prior until measured, then the recent surprises' size."""
    seen = state.surprises.get(gpu, [])
    if not seen:
        return PRIOR_SIGMA
    recent = seen[-4:]
    return max(MIN_SIGMA, 1.5 * math.sqrt(sum(s * s for s in recent) / len(recent)))


def _by_key(state: SearchState) -> dict[str, list[Measurement]]:
    """Measurements by hardware key: a spot node measures the same as the on-demand node of its shape."""
    out: dict[str, list[Measurement]] = {}
    for m in state.measurements:
        out.setdefault(hardware_key(m.key), []).append(m)
    return out


# ---- costs -----------------------------------------------------------------------------------------
def probe_seconds(cand: Candidate, steps: Iterable[int] = PROBE_STEPS) -> float:
    """Model-seconds the probes take: one request per short step count, after a deployment is ready."""
    return sum(cand.fixed_s + s * cand.per_step_s for s in steps)


def full_seconds(cand: Candidate, requests: int = FULL_REQUESTS) -> float:
    """Model-seconds of a full run: `requests` anchor clips spread over the node's replicas, then one more each."""
    replicas = Plan.parse(cand.plan).replicas
    rounds = math.ceil(requests / replicas)
    return rounds * cand.latency_s


def action_cost(cand: Candidate, kind: ActionKind, deployed: bool, safety: float = 1.25) -> tuple[float, float]:
    """(expected seconds, expected USD) of one action on one node, provisioning and load included if needed."""
    seconds = probe_seconds(cand) if kind == "probe" else full_seconds(cand)
    if not deployed:
        seconds += cand.offer.provision_s + cand.load_s
    seconds *= safety
    return seconds, cand.offer.usd_per_hour * seconds / 3600.0


# ---- the decision ----------------------------------------------------------------------------------
def best_verified(state: SearchState, ranked: list[Candidate] | None = None) -> Candidate | None:
    """The best fully measured candidate that meets the constraints at the goal's confidence."""
    ranked = ranked if ranked is not None else candidates(state)
    done = [c for c in ranked if c.stage == "measured" and c.feasible]
    return min(done, key=lambda c: objective_value(state.goal, c)) if done else None


def decide(
    state: SearchState,
    parallel: int = 1,
    margin: float = 0.03,
    max_iterations: int = 40,
) -> Decision:
    """The next actions (at most `parallel`, on distinct candidates), or the reason to stop."""
    goal = state.goal
    ranked = candidates(state)
    best = best_verified(state, ranked)
    best_key = best.key if best else None
    if state.iterations >= max_iterations:
        return Decision(stop_reason=f"iteration cap reached ({max_iterations} measurements)", stop_kind="iterations",
                        best=best_key)  # fmt: skip
    threshold = objective_value(goal, best) - margin * abs(objective_value(goal, best)) if best else math.inf
    contenders = [
        c
        for c in ranked
        if c.stage != "measured"
        and c.key not in state.failed
        and could_be_feasible(goal, c)
        and optimistic_value(goal, c) < threshold
    ]
    if not contenders:
        if best:
            return Decision(
                stop_reason=(
                    f"converged: {best.plan} on {best.offer.id} meets the goal at {CONFIDENCE:.0%} confidence and no "
                    f"unverified candidate can beat it by more than {margin:.0%}"
                ),
                stop_kind="converged",
                best=best_key,
            )
        return Decision(stop_reason="no candidate can meet the goal's constraints", stop_kind="infeasible")
    # Most promising first: a probed contender goes to its full run, others get a probe.
    # A probed contender is verified first: its deployment is live, and a verified best prunes the rest.
    ready = {c.key for c in contenders if c.stage == "probed" or c.key in state.inconclusive}
    contenders.sort(key=lambda c: (c.key not in ready, (optimistic_value(goal, c) + objective_value(goal, c)) / 2))
    left = goal.budget_usd - state.spent_usd
    actions: list[Action] = []
    skipped = 0
    for cand in contenders:
        if len(actions) >= parallel:
            break
        kind: ActionKind = "full" if cand.key in ready else "probe"
        deployed = cand.key in state.deployed
        seconds, usd = action_cost(cand, kind, deployed)
        if usd > left:
            skipped += 1
            continue
        left -= usd
        why = (
            f"predicted {_fmt_objective(goal, cand)} (±{cand.sigma:.0%})"
            + (f" vs best verified {_fmt_objective(goal, best)}" if best else "")
        )  # fmt: skip
        actions.append(
            Action(key=cand.key, kind=kind, expected_usd=usd, expected_s=seconds, needs_deploy=not deployed, reason=why)
        )
    if not actions:
        return Decision(
            stop_reason=(
                f"budget reached: ${state.spent_usd:.2f} of ${goal.budget_usd:g} spent and the next of "
                f"{skipped} contender(s) would not fit in what is left"
            ),
            stop_kind="budget",
            best=best_key,
        )
    return Decision(actions=actions, best=best_key)


def _fmt_objective(goal: Goal, cand: Candidate | None) -> str:
    if cand is None:
        return "-"
    if goal.objective == "min_cost_per_clip":
        return f"${cand.usd_per_clip:.3f}/clip"
    if goal.objective == "min_latency":
        return f"p{goal.latency_percentile} {cand.latency_q_s:.1f} s"
    return f"{cand.clips_per_hour_per_node:.1f} clips/h/node"


def spend_estimate(state: SearchState, parallel: int = 1) -> tuple[float, float, list[str]]:
    """Expected USD and GPU-hours of the search: a probe for every contender, a full run for the likeliest."""
    goal = state.goal
    ranked = [c for c in candidates(state) if could_be_feasible(goal, c)]
    if not ranked:
        return 0.0, 0.0, []
    top = objective_value(goal, ranked[0])
    near = [c for c in ranked if optimistic_value(goal, c) <= top * (1 + 2 * PRIOR_SIGMA)][:8]
    usd = gpu_hours = 0.0
    for i, cand in enumerate(near):
        seconds, cost = action_cost(cand, "probe", False)
        if i < 2:
            s2, c2 = action_cost(cand, "full", True)
            seconds, cost = seconds + s2, cost + c2
        usd += cost
        gpu_hours += seconds / 3600.0 * cand.offer.gpu_count
    return min(usd, goal.budget_usd), gpu_hours, [c.key for c in near]


# ---- learning --------------------------------------------------------------------------------------
def record(state: SearchState, measurement: Measurement, recalibrate: bool = True) -> SearchState:
    """Add one measurement (and what it cost), note how far the belief was off, and refit that GPU's profile."""
    if measurement.kind == "probe" and not usable_probe(measurement):
        return record_inconclusive(state, measurement)
    cands = {c.key: c for c in candidates(state)}
    cand = cands.get(measurement.key)
    if cand is None:
        raise KeyError(f"unknown candidate {measurement.key}")
    observed = _observed_latency(state.goal, measurement)
    predicted = _predicted_latency(state, cand)
    surprises = dict(state.surprises)
    if observed is not None and predicted > 0:
        surprises[cand.gpu] = [*surprises.get(cand.gpu, []), abs(observed / predicted - 1)]
        measurement = measurement.model_copy(update={"predicted_before": predicted})
    new = state.model_copy(
        update={
            "measurements": [*state.measurements, measurement],
            "surprises": surprises,
            "spent_usd": state.spent_usd + measurement.usd,
            "spent_gpu_hours": state.spent_gpu_hours + measurement.gpu_hours,
            "iterations": state.iterations + 1,
        }
    )
    if recalibrate:
        new = recalibrated(new, cand.gpu)
    return new


def _observed_latency(goal: Goal, m: Measurement) -> float | None:
    if m.kind == "full" and m.latencies_s:
        return _median(m.latencies_s)
    if m.per_step_s is not None and m.fixed_s is not None:
        return m.fixed_s + goal.workload.steps * m.per_step_s
    return None


def _predicted_latency(state: SearchState, cand: Candidate) -> float:
    """What the belief (not earlier measurements) predicts for the candidate."""
    p = perf_model.predict(state.goal.workload, Plan.parse(cand.plan), state.beliefs[cand.gpu])
    return p.latency_s - p.guardrail_s


def observations(state: SearchState, gpu: str) -> list[Observation]:
    """The measurements on one GPU type as calibration observations (probes: StepObs, full runs: LatencyObs)."""
    keys = {c.key: c for c in candidates(state) if c.gpu == gpu}
    wl = state.goal.workload
    out: list[Observation] = []
    for m in state.measurements:
        cand = keys.get(m.key)
        if cand is None:
            continue
        plan = Plan.parse(cand.plan).single_replica()
        if m.kind == "probe" and m.per_step_s is not None and m.fixed_s is not None:
            out.append(StepObs(wl, plan, m.per_step_s, m.fixed_s, 0.01, f"probe {m.key}"))
        elif m.kind == "full" and m.latencies_s:
            out.append(LatencyObs(wl, plan, _median(m.latencies_s), 0.01, f"full {m.key}"))
    return out


def recalibrated(state: SearchState, gpu: str, fit: Callable[..., Profile] = fit_profile) -> SearchState:
    """Refit one GPU type's profile to everything measured on it, with the shipped profile as the prior."""
    obs = observations(state, gpu)
    if not obs:
        return state
    shipped = shipped_profile(gpu)
    fixed_total = shipped.text_encode_s + shipped.vae_decode_s + shipped.mux_s
    priors = {
        name: Prior(fixed_total if name == "fixed_s" else float(getattr(shipped, name)), spread)
        for name, spread in RECALIBRATION_SPREAD.items()
    }
    profile = fit(shipped, obs, priors, source=f"recalibrated on {len(obs)} measurement(s) of this run")
    return state.model_copy(update={"beliefs": {**state.beliefs, gpu: profile}})


def usable_probe(m: Measurement) -> bool:
    """Probes fix latency = fixed + steps x per_step only when both come out positive (short clips on fast
    GPUs can drown the step difference in noise); otherwise the candidate goes straight to a full run."""
    return m.per_step_s is not None and m.fixed_s is not None and m.per_step_s > 0 and m.fixed_s >= 0


def record_inconclusive(state: SearchState, m: Measurement) -> SearchState:
    """Bill a probe that could not be read, and ask for a full run of that candidate next."""
    return state.model_copy(
        update={
            "inconclusive": [*state.inconclusive, m.key],
            "spent_usd": state.spent_usd + m.usd,
            "spent_gpu_hours": state.spent_gpu_hours + m.gpu_hours,
            "iterations": state.iterations + 1,
        }
    )


def record_failure(state: SearchState, key: str, usd: float, gpu_hours: float) -> SearchState:
    """A candidate that could not be deployed or measured: bill what it used and never pick it again."""
    return state.model_copy(
        update={
            "failed": [*state.failed, key],
            "spent_usd": state.spent_usd + usd,
            "spent_gpu_hours": state.spent_gpu_hours + gpu_hours,
            "iterations": state.iterations + 1,
        }
    )


def recommendation(state: SearchState) -> Candidate | None:
    """What the search recommends now: the best verified candidate, else None."""
    return best_verified(state)
