"""What the search will likely cost and how long it will likely take: searches simulated against its own belief.

policies/search/nodes.py bounds the search (a probe for every near contender, two full runs, x 1.25 safety); this
module forecasts it. Each simulated search draws a truth from the posterior (a mode by its weight, then the
parameters from that mode's Laplace Gaussian, within their bounds), runs the search's own decide/record loop
against it, and serves every measurement as the twin would (perf_model.predict on the drawn truth, with its
run-to-run noise on the fixed and per-step parts). An action is billed its modelled start (provisioning and a
cold load on a new node, a warm load on a node the search holds, nothing on its own live deployment) plus the
simulated requests, at the offer's price, without the bound's safety factor; the actions of one round run side
by side (their longest is the round's wall time). Everything here is SIMULATED: nothing is run or billed.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from pydantic import BaseModel, Field

from worldtune.policies import belief, perf_model
from worldtune.policies.search import acquisition, evidence, lanes
from worldtune.policies.search.candidates import (
    believed_start_s,
    candidates,
    full_requests,
    held_offers,
    start_seconds,
)
from worldtune.policies.search.words import (
    PROBE_REPEATS,
    PROBE_WARMUP,
    Action,
    Candidate,
    Measurement,
    SearchState,
    offer_of,
    probe_steps,
)
from worldtune.tools.words.models import get_model
from worldtune.tools.words.profile import Profile

RUNS = 3  # simulated searches per forecast: each costs a few seconds of CPU
MAX_ROUNDS = 40  # as the search's own iteration cap
BASIS = (
    "simulated: searches run against truths drawn from the belief (the performance model with its uncertainty), "
    "measurements served as the twin serves them, billed at the offers' prices; nothing run"
)


class Forecast(BaseModel):
    """The likely cost and time of the search, from `runs` simulated searches (median and the dearest)."""

    runs: int
    usd_p50: float
    usd_max: float
    gpu_hours_p50: float
    answer_s_p50: float = Field(description="modelled wall seconds from approval to a verified answer (median)")
    answer_s_max: float
    measurements_p50: float
    stops: dict[str, int] = Field(description="how the simulated searches stopped")
    basis: str = BASIS


def draw_truth(post: belief.Posterior, prior: Profile, rng: np.random.Generator) -> Profile:
    """One profile the belief holds possible: a mode by its weight, then its Laplace Gaussian, within bounds."""
    modes = post.modes()
    weights = np.asarray([m.weight for m in modes])
    mode = modes[int(rng.choice(len(modes), p=weights / weights.sum()))]
    cov = np.asarray(mode.cov)
    values, vectors = np.linalg.eigh((cov + cov.T) / 2)
    x = np.asarray(mode.mean) + (vectors * np.sqrt(np.clip(values, 0.0, None))) @ rng.standard_normal(len(values))
    return post.profile(prior, np.clip(x, post.lower, post.upper))


def _served(
    truth: Profile, cand: Candidate, steps: int, state: SearchState, rng: np.random.Generator
) -> tuple[float, float]:
    """One request as the twin serves it under `truth` (perf_model.noisy_parts, plus the guardrail): (the server's
    seconds, what a probe's fit reads; the client's, what the twin engine reports and goals are judged on)."""
    p = perf_model.predict(state.goal.workload.with_changes(steps=steps), cand.plan, truth)
    per_step, fixed = perf_model.noisy_parts(p, truth.noise_cv, rng)
    server = p.guardrail_s + fixed + steps * per_step
    return server, server + p.client_overhead_s


def _latency(truth: Profile, cand: Candidate, steps: int, state: SearchState, rng: np.random.Generator) -> float:
    """One request's seconds on the client's clock (_served)."""
    return _served(truth, cand, steps, state, rng)[1]


def _as_truth(truth: Profile, cand: Candidate, state: SearchState) -> Candidate:
    """The candidate with its node's starts as the drawn truth has them (its warm and cold loads; no run's start
    factor): the search decides on what it believes, a node bills what it takes."""
    spec = get_model(state.goal.workload.model)
    cold = perf_model.load_time_s(spec, truth, cold=True, plan=cand.plan)
    warm = perf_model.load_time_s(spec, truth, cold=False, plan=cand.plan)
    return cand.model_copy(update={"load_s": warm, "cold_load_s": cold, "start_factor": 1.0})


def served_probe(key: str, steps: int, served: Callable[[int], tuple[float, float]]) -> tuple[Measurement, float]:
    """A probe as a twin serves it (SIMULATED; the forecast's truth, or the rehearsal's): PROBE_REPEATS requests at
    each of the probe's step counts, then PROBE_WARMUP at the fewest before them (drawn after, so that a seeded
    stream gives what it always has). `served(steps)`: one request's seconds, (the server's, the client's). The fit
    reads the server's clock, as the agent's (agent/verify.py); the node is busy for the client's. (The probe's
    measurement, the seconds the node is busy.)"""
    asked = probe_steps(steps)
    runs = [(s, *served(s)) for s in asked for _ in range(PROBE_REPEATS)]
    warm = sum(served(min(asked))[1] for _ in range(PROBE_WARMUP))
    points = [(s, server) for s, server, _ in runs]
    slope, intercept = np.polyfit([s for s, _ in points], [v for _, v in points], 1)
    m = Measurement(key=key, kind="probe", per_step_s=float(slope), fixed_s=float(intercept), repeats=PROBE_REPEATS,
                    probe_points=points)  # fmt: skip
    return m, warm + sum(client for _, _, client in runs)


def _measure(
    truth: Profile,
    cand: Candidate,
    action: Action,
    state: SearchState,
    rng: np.random.Generator,
    start: float,
    true_cand: Candidate,
) -> tuple[Measurement, float, float]:
    """The simulated measurement of `action` started `start` seconds after the round began (provisioning, load):
    its wall seconds and node-seconds (a full run over its lanes, stopped once decided: policies/search/lanes.py).
    `true_cand`: the candidate with the truth's starts (_as_truth), which its other lanes take."""
    if action.kind == "probe":
        m, busy = served_probe(cand.key, state.goal.workload.steps, lambda s: _served(truth, cand, s, state, rng))
        return m, start + busy, start + busy
    n = action.requests or full_requests(state.goal)
    shares = action.lane_requests or [n]
    steps = state.goal.workload.steps
    latencies = [[_latency(truth, cand, steps, state, rng) for _ in range(k)] for k in shares]
    starts = [start] + [first for first, _ in lanes.extra_starts(true_cand, len(shares), spare=state.spare_lanes)]
    kept, wall, node_s, decided = lanes.simulate(state, starts, latencies, cand.plan.replicas)
    m = Measurement(
        key=cand.key,
        kind="full",
        latencies_s=kept,
        requested=len(kept) if decided else n,
        lanes=len(shares),
        decided=decided,
    )
    return m, wall, node_s


def simulate(state: SearchState, parallel: int, rng: np.random.Generator) -> tuple[float, float, float, int, str]:
    """One search against a truth drawn from `state`'s belief: (usd, gpu-hours, wall seconds, measurements, stop)."""
    truth = {gpu: draw_truth(state.posterior(gpu), state.beliefs[gpu], rng) for gpu in state.beliefs}
    s, usd, gpu_hours, wall, count = state, 0.0, 0.0, 0.0, 0
    for _ in range(MAX_ROUNDS):
        decision = acquisition.decide(s, parallel=parallel)
        if decision.stop_reason:
            return usd, gpu_hours, wall, count, decision.stop_kind or "stopped"
        by_key = {c.key: c for c in candidates(s)}
        held = held_offers(s)
        # as agent/graph.decide: a held node takes a new candidate on its offer; one left on a full run's offer joins it
        _, _, joined = lanes.hand_over(decision.actions, {k: k for k in s.deployed}, s.reuse_nodes)
        s = s.model_copy(update={"spare_lanes": lanes.kept_spares(s.spare_lanes, decision.actions) + joined})
        spares: list[str] = []
        ends = []
        for action in decision.actions:
            cand = by_key[action.key]
            deployed = action.key in s.deployed and not action.redeploy
            true_cand = _as_truth(truth[cand.gpu], cand, s)  # starts billed as the truth's nodes take them
            on_held = not deployed and cand.offer.id in held
            start = start_seconds(true_cand, deployed, node_held=on_held)
            m, seconds, node_s = _measure(truth[cand.gpu], cand, action, s, rng, start, true_cand)
            if not deployed:  # the node's start, measured and believed, as agent/verify.py records it
                m = m.model_copy(update={"start_s": start, "start_predicted_s": believed_start_s(cand, on_held)})
            if action.early_lanes:  # nodes launched with the probe: up after their start, billed until the run
                cold = start_seconds(true_cand, False)
                node_s += action.early_lanes * (cold + max(0.0, seconds - action.early_after_s - cold))
                seconds = max(seconds, action.early_after_s + cold)
                spares += [f"{cand.offer.id}|{action.early_plan}"] * action.early_lanes
            node_s += action.spares_held * seconds  # spare nodes kept up through the probe, waiting
            cost, hours = cand.offer.usd_per_hour * node_s / 3600.0, cand.offer.gpu_count * node_s / 3600.0
            s = evidence.record(s, m.model_copy(update={"usd": cost, "gpu_hours": hours}))
            usd, gpu_hours, count = usd + cost, gpu_hours + hours, count + 1
            ends.append(seconds)
        wall += max(ends)
        # each action's node is held; a full run used its offer's spare nodes (and freed them), a probe may add some
        run_on = {offer_of(a.key) for a in decision.actions if a.kind == "full"}
        left = [k for k in s.spare_lanes if offer_of(k) not in run_on] + spares
        s = s.model_copy(update={"deployed": [a.key for a in decision.actions], "elapsed_s": wall, "spare_lanes": left})
    return usd, gpu_hours, wall, count, "iteration_cap"


def forecast(state: SearchState, parallel: int = 1, runs: int = RUNS, seed: int = 0) -> Forecast:
    """The search's likely cost and time to a verified answer, from `runs` simulated searches (seeded)."""
    rng = np.random.default_rng(seed)
    outcomes = [simulate(state, parallel, rng) for _ in range(max(1, runs))]
    usd, hours, wall, count = (np.asarray([o[i] for o in outcomes], dtype=float) for i in range(4))
    stops: dict[str, int] = {}
    for o in outcomes:
        stops[o[4]] = stops.get(o[4], 0) + 1
    return Forecast(
        runs=len(outcomes),
        usd_p50=float(np.median(usd)),
        usd_max=float(usd.max()),
        gpu_hours_p50=float(np.median(hours)),
        answer_s_p50=float(np.median(wall)),
        answer_s_max=float(wall.max()),
        measurements_p50=float(np.median(count)),
        stops=dict(sorted(stops.items())),
    )
