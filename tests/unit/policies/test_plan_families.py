"""Issue 37 item 6 (its report): estimate and plans say which of a plan's families has no measured cell on the GPU."""

from __future__ import annotations

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
