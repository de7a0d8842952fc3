"""Plan families: which published cells a plan is like, for leave-family-out validation and for the spread a plan
gets when no cell of its family was fitted.

A family is a mechanism the other cells do not show: another GPU type, tensor parallel, a Ulysses width, an
attention backend, VAE patch parallel. benchmarks/model_accuracy.py refits with each family held out and
predicts it; the calibration keeps the spread those predictions show (Profile.unmeasured_family_sigma), and
`plans`, `estimate` and the search give it to a plan whose family has no fitted cell on its GPU type.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from worldtune.tools.words.plan import Plan
from worldtune.tools.words.profile import Profile

Cell = dict[str, Any]  # a published cell (policies/published.yaml)
PLAN_FAMILIES: dict[str, Callable[[Cell], bool]] = {
    "B200 (every B200 cell)": lambda c: c["gpu"] == "B200",
    "tensor parallel": lambda c: Plan.parse(c["plan"]).tp > 1,
    "Ulysses 2 (with ring 2)": lambda c: Plan.parse(c["plan"]).ulysses == 2,
    "Ulysses 4": lambda c: Plan.parse(c["plan"]).ulysses == 4,
    "attention backend": lambda c: Plan.parse(c["plan"]).attn != "auto",
    "VAE patch parallel": lambda c: Plan.parse(c["plan"]).vae > 1,
}
STEP_FAMILIES: dict[str, Callable[[Cell], bool]] = {
    "all steps but 35": lambda c: c["steps"] != 35,
    "all steps but 50": lambda c: c["steps"] != 50,
}


def scheme(plan: Plan) -> tuple[int, int, int]:
    """What a plan's family is for the spread: its tensor parallel, Ulysses and ring degrees."""
    return plan.tp, plan.ulysses, plan.ring


def fitted_plans(profile: Profile) -> list[Plan]:
    """The plans of the latency cells the profile was fitted to (its fit record)."""
    out = []
    for cell in profile.fit.get("cells", []):
        words = str(cell.get("label", "")).split()
        if len(words) >= 2 and words[0] == profile.gpu and words[-1] == "steps":
            try:
                out.append(Plan.parse(words[1]))
            except ValueError:
                continue
    return out


def unmeasured_family(profile: Profile, plan: Plan) -> bool:
    """No fitted cell on this GPU type has the plan's tensor parallel, Ulysses and ring degrees. A profile without a
    fit record (a measured one, a hand-written one) says nothing: not flagged."""
    fitted = fitted_plans(profile)
    return bool(fitted) and scheme(plan) not in {scheme(p) for p in fitted}


def family_sigma(profile: Profile, plan: Plan) -> float:
    """The extra relative spread of a plan whose family has no fitted cell (0 otherwise)."""
    return profile.unmeasured_family_sigma if unmeasured_family(profile, plan) else 0.0


def rms(errors: list[float]) -> float:
    return math.sqrt(sum(e * e for e in errors) / len(errors)) if errors else 0.0


def leave_family_out(
    fit_published: Callable[..., Profile],
    data: dict[str, Any],
    families: dict[str, Callable[[Cell], bool]] | None = None,
) -> list[dict[str, Any]]:
    """Each family's cells predicted by fits made without any of them (B200's priors from the H200 fit made
    without them too): per family the cells, worst |error| and mean signed error. `fit_published` is
    policies/calibration.fit_published (handed in: the calibration imports this module)."""
    out = []
    for family, member in (families or PLAN_FAMILIES).items():
        held = [c for c in data["cells"] if member(c)]
        excluded = {f"{c['gpu']} {c['plan']} {c['steps']} steps" for c in held}
        h200 = fit_published("H200", excluded)
        profiles = {"H200": h200, "B200": fit_published("B200", excluded, reference=h200)}
        cells = []
        for cell in held:
            predicted = cell_latency(cell, profiles[cell["gpu"]])
            label, measured = f"{cell['gpu']} {cell['plan']} {cell['steps']} steps", cell["latency_s"]
            error = round(predicted / measured - 1, 4)
            cells.append(
                {"cell": label, "measured_s": measured, "predicted_s": round(predicted, 2), "rel_error": error}
            )
        errors = [c["rel_error"] for c in cells]
        out.append(
            {"family": family, "n": len(cells), "cells": cells, "worst_abs_rel_error": max(abs(e) for e in errors),
             "mean_signed_rel_error": round(sum(errors) / len(errors), 4), "rms_rel_error": round(rms(errors), 4)}
        )  # fmt: skip
    return out


def cell_latency(cell: Cell, profile: Profile) -> float:
    """A published cell's latency as the model predicts it, as it was timed (a wall clock adds the client's part)."""
    from worldtune.policies import perf_model
    from worldtune.tools.words.workload import anchor_workload

    latency = perf_model.predict(anchor_workload(steps=cell["steps"]), Plan.parse(cell["plan"]), profile).latency_s
    return latency + (profile.client_overhead_s if cell.get("measure") == "wall" else 0.0)


def unmeasured_spread(rows: list[dict[str, Any]]) -> float:
    """The spread a plan of an unfitted family gets: the RMS error over every held-out plan family's cells."""
    return rms([c["rel_error"] for r in rows for c in r["cells"]])
