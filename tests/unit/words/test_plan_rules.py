"""Every plan rule refuses an example with a message naming the rule, the values and an alternative."""

from __future__ import annotations

import pytest

from worldtune.policies.calibration import shipped_profile
from worldtune.tools.words import plan_rules
from worldtune.tools.words.gpus import get_gpu
from worldtune.tools.words.plan import Plan
from worldtune.tools.words.workload import anchor_workload

H200 = get_gpu("H200")
PROFILE = shipped_profile("H200")
ANCHOR = anchor_workload()


def verdict(plan: str, workload=ANCHOR, gpu=H200, node_gpus=None):  # type: ignore[no-untyped-def]
    return plan_rules.check(Plan.parse(plan), workload, gpu, PROFILE, node_gpus)


@pytest.mark.parametrize(
    ("plan", "rule", "words"),
    [
        ("tp8-hsdp8", "hsdp-exclusive", ["tensor parallel", "tp=8"]),
        ("cfg2-u4-hsdp3", "hsdp-size", ["shard 3", "world size 8"]),
        ("cfg4-u2", "cfg-size", ["cfg=4"]),
        ("u3", "ulysses-heads", ["u=3", "8 KV"]),
        ("tp3", "tp-heads", ["tp=3"]),
        ("cfg2-u8", "world-size", ["16 GPUs"]),
        ("3xtp4", "gpus-per-node", ["12 GPUs"]),
        ("cfg2-vae4", "vae-size", ["4", "2 GPUs"]),
        ("tp2", "memory", []),  # checked on H100 below
    ][:-1],
)
def test_structural_rules(plan: str, rule: str, words: list[str]) -> None:
    v = verdict(plan)
    assert not v.valid and v.rule == rule
    for word in words:
        assert word in v.reason
    alternative = Plan.parse(v.alternative)  # a real plan string ...
    assert plan_rules.check(alternative, ANCHOR, H200, PROFILE).valid  # ... that is valid


def test_cfg_parallel_refused_for_distilled_checkpoint() -> None:
    wl = anchor_workload("cosmos3-super-i2v-4step")
    v = verdict("cfg2-u4", workload=wl)
    assert v.rule == "cfg-distilled" and "distilled" in v.reason
    assert "cfg" not in v.alternative


def test_cfg_parallel_refused_without_guidance() -> None:
    v = verdict("cfg2-u4", workload=ANCHOR.with_changes(guidance_scale=1.0))
    assert v.rule == "cfg-guidance" and "guidance_scale=1.0" in v.reason


def test_memory_rule_on_small_gpu() -> None:
    h100 = get_gpu("H100")
    v = plan_rules.check(Plan.parse("1gpu"), ANCHOR, h100, PROFILE)
    assert not v.valid and v.rule == "memory"
    assert "GiB per GPU" in v.reason and "79.6" in v.reason
    fixed = Plan.parse(v.alternative)
    assert plan_rules.check(fixed, ANCHOR, h100, PROFILE).valid


def test_whole_model_on_one_h200_is_at_the_edge() -> None:
    v = verdict("1gpu")
    assert v.valid and "expandable_segments" in v.warning


def test_published_recipes_are_valid() -> None:
    for plan in ("cfg2-u4-hsdp8", "tp8", "cfg2-hsdp2"):
        assert verdict(plan).valid, plan


def test_candidates_use_exactly_the_gpus_asked() -> None:
    for gpus in (1, 2, 4, 8):
        plans = list(plan_rules.candidate_plans(gpus))
        assert plans and all(p.gpus == gpus for p in plans)
        assert len({str(p) for p in plans}) == len(plans)
