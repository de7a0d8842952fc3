"""What a measurement teaches the search, and which measurements are not evidence at all.

A probe gives per-step and fixed time of its plan, a full run the latency at the goal's workload; both
become belief_fit.Observations with their own noise (the run-to-run noise as learned so far, the run's spread) and
refit the posterior of that GPU type; the full runs' samples also update that GPU type's noise (belief_noise.py),
which the belief profile carries as its noise_cv, so every percentile, bound and stop built on it widens with it.
A full run with failed requests, fewer answers than asked, answers that
waited behind someone else's load, or an engine the deployment check found dead is rejected: it is
retried once on a fresh deployment (search.RETRIES), then the candidate is failed with the reason.
"""

from __future__ import annotations

import math

import numpy as np

from worldtune.policies import belief_fit, belief_noise, perf_model
from worldtune.policies.search.candidates import candidate_for, fit_noise
from worldtune.policies.search.words import (
    RETRIES,
    Candidate,
    CandidateKey,
    Measurement,
    Rejected,
    SearchState,
)


def problem(m: Measurement) -> str:
    """Why a measurement is not evidence ('' when it is)."""
    if m.engine_problem:
        return f"engine check: {m.engine_problem}"
    if m.kind != "full":
        return ""
    if m.failed_requests:
        return f"{m.failed_requests} of {m.requested or len(m.latencies_s) + m.failed_requests} requests failed"
    if m.requested and len(m.latencies_s) < m.requested:
        return f"{len(m.latencies_s)} answers of {m.requested} asked"
    if not m.latencies_s:
        return "no answers"
    if m.contaminated:
        return f"{m.contaminated} answer(s) waited behind load that was not this benchmark's"
    return ""


def record(state: SearchState, measurement: Measurement, recalibrate: bool = True) -> SearchState:
    """Add one measurement (and what it cost), note how far the belief was off, and refit that GPU's posterior."""
    bad = problem(measurement)
    if bad:
        return reject(state, measurement, bad)
    if measurement.kind == "probe" and not usable_probe(measurement):
        return record_inconclusive(state, measurement)
    cand = candidate_for(state, measurement.key)
    observed = _observed_latency(state, measurement)
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
            "retry": [k for k in state.retry if k != measurement.key],
        }
    )
    return recalibrated(new, cand.gpu) if recalibrate else new


def reject(state: SearchState, m: Measurement, reason: str) -> SearchState:
    """Bill a measurement that is not evidence; retry it once on a fresh deployment, then fail the candidate."""
    tries = sum(1 for r in state.rejected if r.key == m.key and r.kind == m.kind)
    entry = Rejected(key=m.key, kind=m.kind, benchmark_id=m.benchmark_id, reason=reason)
    update: dict[str, object] = {
        "rejected": [*state.rejected, entry],
        "spent_usd": state.spent_usd + m.usd,
        "spent_gpu_hours": state.spent_gpu_hours + m.gpu_hours,
        "iterations": state.iterations + 1,
        "retry": [k for k in state.retry if k != m.key],
    }
    if tries < RETRIES:
        update["retry"] = [*update["retry"], m.key]  # type: ignore[misc]
    else:
        update["failed"] = [*state.failed, m.key]
        update["failures"] = {**state.failures, m.key: f"rejected {tries + 1} times: {reason}"}
    return state.model_copy(update=update)


def _observed_latency(state: SearchState, m: Measurement) -> float | None:
    if m.kind == "full" and m.latencies_s:
        return float(np.median(m.latencies_s))
    if m.per_step_s is not None and m.fixed_s is not None:
        return m.fixed_s + state.goal.workload.steps * m.per_step_s
    return None


def _predicted_latency(state: SearchState, cand: Candidate) -> float:
    """What the belief (not earlier measurements) predicts for the candidate."""
    p = perf_model.predict(state.goal.workload, cand.plan, state.beliefs[cand.gpu])
    return p.latency_s - p.guardrail_s


def observations(state: SearchState, gpu: str) -> list[belief_fit.Observation]:
    """The measurements on one GPU type as the posterior's observations, each with its own noise."""
    wl = state.goal.workload
    cv = noise(state, gpu).cv
    out: list[belief_fit.Observation] = []
    for m in state.measurements:
        key = CandidateKey.of(m.key)
        if key.gpu != gpu:
            continue
        plan = key.plan.single_replica()
        if m.kind == "probe" and m.per_step_s and m.fixed_s and m.per_step_s > 0 and m.fixed_s > 0:
            fit = fit_noise(m, wl.steps, cv)  # the two-point fit's noise
            step_sd, fixed_sd = fit.per_step, fit.fixed
            for quantity, value, sd in (("per_step", m.per_step_s, step_sd), ("fixed", m.fixed_s, fixed_sd)):
                out.append(
                    belief_fit.Observation(
                        plan=plan, workload=wl, quantity=quantity, value=value, rel_sigma=sd, label=f"probe {m.key}"
                    )
                )
        elif m.kind == "full" and m.latencies_s:
            values = np.asarray(m.latencies_s)
            median = float(np.median(values))
            spread = float(values.std(ddof=1)) / median if values.size > 1 else cv
            sd = max(1.25 * spread / math.sqrt(values.size), 0.0005)  # the median's standard error
            out.append(
                belief_fit.Observation(
                    plan=plan, workload=wl, quantity="latency", value=median, rel_sigma=sd, label=f"full {m.key}"
                )
            )
    return out


def noise(state: SearchState, gpu: str) -> belief_noise.Noise:
    """One GPU type's run-to-run noise: the prior profile's, updated by the samples of every full run on it and by
    the repeats of every probe (the requests of one step count: the same shape, so their spread is the noise)."""
    prior = state.prior(gpu)
    runs = []
    for m in state.measurements:
        key = CandidateKey.of(m.key)
        if key.gpu != gpu:
            continue
        groups = (
            [(state.goal.workload.steps, m.latencies_s)]
            if m.kind == "full"
            else [
                (steps, [v for s, v in m.probe_points if s == steps])
                for steps in sorted({s for s, _ in m.probe_points})
            ]
        )
        for steps, latencies in groups:
            if len(latencies) < 2:
                continue
            p = perf_model.predict(state.goal.workload.with_changes(steps=steps), key.plan, prior)
            runs.append((latencies, belief_noise.share_ratio(p.fixed_s, p.latency_s - p.fixed_s)))
    return belief_noise.learn(prior, runs)


def recalibrated(state: SearchState, gpu: str) -> SearchState:
    """Refit one GPU type's posterior to everything measured on it; the MAP profile, with the noise learned so
    far, becomes the belief."""
    obs = observations(state, gpu)
    if not obs:
        return state
    prior = state.prior(gpu)
    post = belief_fit.fit(prior, obs, start=state.posteriors.get(gpu))
    learned = noise(state, gpu)
    basis = {**prior.basis, "noise_cv": learned.basis()} if learned.learned else prior.basis
    profile = post.profile(prior).model_copy(
        update={
            "source": f"posterior MAP after {len(obs)} observation(s) of this run: {post.summary()}; "
            f"{learned.describe()}",
            "noise_cv": learned.cv,
            "basis": basis,
        }
    )
    return state.model_copy(
        update={"posteriors": {**state.posteriors, gpu: post}, "beliefs": {**state.beliefs, gpu: profile}}
    )


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


def record_failure(state: SearchState, key: str, usd: float, gpu_hours: float, reason: str = "") -> SearchState:
    """A candidate that could not be deployed or measured: bill what it used and never pick it again."""
    return state.model_copy(
        update={
            "failed": [*state.failed, key],
            "failures": {**state.failures, key: reason or "failed"},
            "spent_usd": state.spent_usd + usd,
            "spent_gpu_hours": state.spent_gpu_hours + gpu_hours,
            "iterations": state.iterations + 1,
            "retry": [k for k in state.retry if k != key],
        }
    )
