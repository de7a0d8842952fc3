"""Where each figure of a tuning run's record comes from: measured, simulated or assumed (issue 15).

A rehearsal on the twin produces numbers that look like measurements but are a simulation of a profile;
a prediction rests on model terms some of which are assumed, not fitted; prices come from a dated
snapshot; and an empirical percentile from a handful of samples is not a claim. `provenance(record)`
says all of that from the record alone (so the report, `tune`'s output and its JSON say the same thing),
and `labels(provenance)` turns it into the short lines a person reads next to the figures.
"""

from __future__ import annotations

from worldtune.tools.words.plan import Plan
from worldtune.tools.words.run_summary import Figures, LatencyClaim, Provenance, RunSummary, Spend
from worldtune.tools.words.stats import samples_needed

# Profile terms by the plan feature they matter for (by name prefix, so a new term of a mechanism is covered
# without a list to keep in step); a term is listed only when the plan exercises it.
_PREFIX_FEATURE: tuple[tuple[str, str], ...] = (
    ("fp8_", "fp8"),
    ("hsdp_", "hsdp"),
    ("ring_", "ring"),
    ("vae_parallel", "vae"),
    ("vae_tile", "vae"),
    ("ulysses_", "ulysses"),
    ("guardrail_", "guardrails"),
)


def _feature_of(term: str) -> str:
    name = term.split(" ")[0]
    return next((feature for prefix, feature in _PREFIX_FEATURE if name.startswith(prefix)), "always")


def _features(plan: Plan, guardrails: bool) -> set[str]:
    found = {"always"}
    if plan.fp8:
        found.add("fp8")
    if plan.hsdp:
        found.add("hsdp")
    if plan.ring > 1:
        found.add("ring")
    if plan.vae > 1:
        found.add("vae")
    if plan.ulysses > 1:
        found.add("ulysses")
    if guardrails:
        found.add("guardrails")
    return found


def assumed_terms(gpu: str, plan: Plan, guardrails: bool) -> list[str]:
    """The shipped profile's assumed (not fitted, not measured) terms that enter this plan's prediction."""
    from worldtune.tools.plans.estimate import resolve_profile
    from worldtune.tools.words.errors import WorldtuneError

    try:
        profile = resolve_profile(gpu)
    except (WorldtuneError, ValueError, OSError):  # an uncalibrated GPU type: no shipped profile to read
        return []
    features = _features(plan, guardrails)
    return [t for t in profile.assumed if _feature_of(t) in features]


def _latency_claim(measured: Figures, percentile: int, confidence: float) -> LatencyClaim:
    """What the measured latency supports at the goal's confidence (records before it had one: 99%, read from
    the figures): the tolerance bound always, the empirical percentile only with n."""
    n = measured.samples or 0
    confidence = measured.claim_confidence or confidence
    needed = samples_needed(percentile / 100.0, confidence)
    # the parametric bound by its name (tools/words/stats.py); older records call it latency_p95_upper_s
    level = 95 if confidence == 0.99 and measured.claim_confidence is None else round(confidence * 100)
    name = f"p{percentile}_upper_{level}conf_normal"
    bound = measured.figure(name)
    bound = bound if bound is not None else measured.figure(f"latency_p{percentile}_upper_s")
    claim = (
        f"p{percentile} <= {bound} s at {level}% confidence ({name}: one-sided normal tolerance bound over n={n} "
        "full-step latencies; assumes normally distributed latencies)"
        if bound is not None
        else None
    )
    # the record keeps the percentile itself only when order statistics claim it (agent/record._figures)
    empirical = measured.figure(f"latency_p{percentile}_s")
    if not n:
        said = "none measured"
    elif n >= needed and empirical is not None:
        said = f"p{percentile} <= {empirical} s: claimable by order statistics (n={n} >= {needed})"
    else:
        said = f"p{percentile} not claimable on its own (n={n} < {needed} samples measured)"
    return LatencyClaim(
        percentile=percentile,
        samples=n,
        samples_needed_for_empirical=needed,
        confidence=confidence,
        claim=claim,
        empirical=said,
    )


def provenance(record: RunSummary) -> Provenance:
    """Say, from a run's record, which figures are simulated or measured, what is assumed and how prices are dated."""
    options, goal, rec = record.options, record.goal, record.recommendation
    twin = options.engine == "twin"
    if twin:
        profile = (
            f"the profile {options.twin_profile}"
            if options.twin_profile
            else "the shipped profile the agent also starts from (a rehearsal of the model, not a test of it)"
        )
        measured_by = (
            f"the twin engine (infra {options.infra}) served every request with timings from the "
            f"performance model on {profile}, at time scale {options.time_scale or 1:g} (wall seconds x the "
            "scale = model seconds); no GPU ran"
        )
    else:
        measured_by = f"vLLM-Omni on real GPUs ({options.infra}), timed by worldtune's benchmark client"
    offer = rec.offer_detail if rec else None
    return Provenance(
        engine="twin" if twin else "vllm-omni",
        simulated=twin,
        measured_figures=measured_by,
        twin_profile=(options.twin_profile or "shipped") if twin else None,
        time_scale=options.time_scale if twin else None,
        predicted_figures="predicted by the performance model with the profile the agent believed before measuring",
        assumed_terms=assumed_terms(rec.gpu, rec.plan, goal.workload.guardrails) if rec else [],
        assumed_spread="predicted p95 = p50 x (1 + 1.645 x 0.2%): the default run-to-run noise, assumed",
        prices=f"{offer.source}: ${offer.usd_per_hour:.2f}/h as of {offer.as_of or '?'}" if offer else "no offer",
        latency=_latency_claim(record.measured, goal.latency_percentile, goal.confidence),
        spend=(
            "modelled: offer price x the twin's model-seconds (no money was spent)"
            if twin
            else "offer price x wall time of the rented nodes"
        )
        + _answer_time(record.spend),
        artifacts=(
            "rendered for vllm-omni from the simulated choice: verify on real GPUs before relying on the numbers"
            if twin
            else "rendered for the measured deployment"
        ),
    )


def of_record(record: RunSummary) -> Provenance:
    """A record's provenance: as it was written when the run ended, else said from the record now."""
    return record.provenance or provenance(record)


def labels(p: Provenance) -> list[str]:
    """Short lines for a person, from a provenance: what is simulated, measured and assumed, and how far the latency
    claim goes."""
    lines = [("simulated: " if p.simulated else "measured: ") + p.measured_figures]
    lines.append("predicted: " + p.predicted_figures)
    if p.assumed_terms:
        lines.append("assumed (not fitted or measured): " + ", ".join(p.assumed_terms) + "; " + p.assumed_spread)
    claim = p.latency
    lines.append("latency claim: " + "; ".join(x for x in (claim.claim, claim.empirical) if x))
    lines.append("prices: " + p.prices + "; spend " + p.spend)
    return lines


def _answer_time(spend: Spend) -> str:
    """The time to a verified answer, as the spend record gives it."""
    return f"; time to a verified answer {spend.answer_hours:.2f} h ({spend.answer_basis})"
