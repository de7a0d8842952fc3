"""Issue 37 item 6 (its report): estimate and plans say which of a plan's families has no measured cell on the GPU."""

from __future__ import annotations

import math

import pytest

from worldtune.policies.calibration import load_published, plan_families, unmeasured_families
from worldtune.tools.plans.estimate import estimate
from worldtune.tools.words.plan import Plan


def test_a_plan_belongs_to_a_family_per_mechanism_it_uses() -> None:
    assert plan_families(Plan.parse("tp2-cfg2-u2-vae8-fp8-cudnn")) == [
        "tensor parallel", "CFG parallel", "Ulysses 2", "VAE patch parallel", "FP8", "attention backend cudnn",
    ]  # fmt: skip
    assert plan_families(Plan.parse("8x1gpu")) == ["one GPU"]


def test_families_without_a_published_cell_on_the_gpu_are_named() -> None:
    assert unmeasured_families("H200", Plan.parse("cfg2-u4-hsdp8")) == []  # the published recommended plan
    assert unmeasured_families("H200", Plan.parse("tp8-fp8")) == ["FP8"]  # FP8 cells are on other GPUs only
    assert unmeasured_families("B200", Plan.parse("tp8")) == ["tensor parallel"]  # tp8 was measured on H200 only
    data = load_published()
    data["cells"] = [c for c in data["cells"] if not c["plan"].startswith("tp8")]
    assert unmeasured_families("H200", Plan.parse("tp8"), data) == ["tensor parallel"]


def test_estimate_carries_them() -> None:
    assert estimate(gpu="B200", plan="tp8").unmeasured_families == ["tensor parallel"]
    assert estimate(gpu="H200", plan="cfg2-u4-hsdp8").model_dump(mode="json")["unmeasured_families"] == []


def test_the_search_widens_an_unmeasured_familys_spread_until_the_run_measures_one_of_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib

    from worldtune.policies.calibration import UNMEASURED_FAMILY_SD
    from worldtune.policies.search import Measurement, initial_state, record
    from worldtune.policies.search.candidates import _run_families, candidates, family_sd

    cands = importlib.import_module(
        "worldtune.policies.search.candidates"
    )  # the module: the package's `candidates` is the function
    from worldtune.tools.plans.offers import all_offers
    from worldtune.tools.words.goal import Goal
    from worldtune.tools.words.workload import anchor_workload

    assert family_sd("B200", Plan.parse("tp8"), set()) == UNMEASURED_FAMILY_SD
    assert family_sd("H200", Plan.parse("tp8"), set()) == 0.0  # published tp8 cells on H200
    assert family_sd("B200", Plan.parse("tp8"), {"tensor parallel"}) == 0.0  # measured by this run

    goal = Goal(workload=anchor_workload(), latency_bound_s=200.0, gpus=["B200"], confidence=0.95)
    state = initial_state(goal, all_offers("snapshot"))

    def sigmas(s: object) -> dict[str, float]:
        return {c.key: c.sigma for c in candidates(s)}  # type: ignore[arg-type]

    wide = sigmas(state)
    monkeypatch.setattr(cands, "UNMEASURED_FAMILY_SD", 0.0)
    narrow = sigmas(state)
    tp8 = next(k for k in wide if k.endswith("|tp8"))
    hsdp = next(k for k in wide if k.endswith("|cfg2-u4-hsdp8"))  # the published B200 plan: nothing added
    assert wide[tp8] == pytest.approx(math.hypot(narrow[tp8], UNMEASURED_FAMILY_SD))
    assert wide[hsdp] == narrow[hsdp]
    monkeypatch.setattr(cands, "UNMEASURED_FAMILY_SD", UNMEASURED_FAMILY_SD)
    # a tensor parallel plan measured on B200 in this run: tp8 is then predicted from a measured family
    measured = record(state, Measurement(key=tp8.replace("|tp8", "|2xtp4"), kind="probe", per_step_s=1.3, fixed_s=15.0))
    assert family_sd("B200", Plan.parse("tp8"), _run_families(measured)["B200"]) == 0.0
