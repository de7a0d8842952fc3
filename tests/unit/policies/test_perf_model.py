"""The performance model's basic laws, and its fit to the published cells."""

from __future__ import annotations

import pytest

from worldtune.policies import perf_model
from worldtune.policies.calibration import fit_all, load_published, shipped_profile
from worldtune.tools.plans.offers import cheapest_offer
from worldtune.tools.words.plan import Plan
from worldtune.tools.words.workload import anchor_workload

PROFILE = shipped_profile("H200")
REC = Plan.parse("cfg2-u4-hsdp8")


def latency(**changes: object) -> float:
    return perf_model.predict(anchor_workload(**changes), REC, PROFILE).latency_s


def test_latency_grows_with_steps_frames_and_resolution() -> None:
    assert latency(steps=50) > latency(steps=35) > latency(steps=4)
    assert latency(num_frames=189) > latency(num_frames=93) > latency(num_frames=45)
    assert latency(width=1280, height=720) > latency(width=832, height=480) > latency(width=320, height=192)


def test_latency_is_affine_in_steps() -> None:
    l4, l8, l35 = latency(steps=4), latency(steps=8), latency(steps=35)
    per_step = (l8 - l4) / 4
    assert l35 == pytest.approx(l4 + 31 * per_step, rel=1e-9)


def test_memory_per_gpu_falls_with_more_hsdp_shards() -> None:
    wl = anchor_workload()
    mem = [
        perf_model.memory_breakdown(perf_model.get_model(wl.model), wl, Plan.parse(p), PROFILE).total_gib
        for p in ("cfg2-u4", "cfg2-u4-hsdp2", "cfg2-u4-hsdp4", "cfg2-u4-hsdp8")
    ]
    assert mem == sorted(mem, reverse=True) and mem[0] - mem[-1] > 50


def test_cost_per_clip_is_price_over_throughput() -> None:
    p = perf_model.predict(anchor_workload(), REC, PROFILE)
    offer = cheapest_offer("H200", 8)
    assert offer is not None
    assert offer.usd_per_clip(p.clips_per_hour_per_node) == pytest.approx(
        offer.usd_per_hour / p.clips_per_hour_per_node
    )


def test_more_replicas_more_node_throughput_same_latency() -> None:
    one = perf_model.predict(anchor_workload(), Plan.parse("tp4"), PROFILE)
    two = perf_model.predict(anchor_workload(), Plan.parse("2xtp4"), PROFILE)
    assert two.latency_s == one.latency_s
    assert two.clips_per_hour_per_node == pytest.approx(2 * one.clips_per_hour_per_node)


def test_guardrails_add_time() -> None:
    assert latency(guardrails=True) > latency(guardrails=False)


def test_every_published_cell_within_five_percent() -> None:
    profiles = fit_all()
    for cell in load_published()["cells"]:
        wl = anchor_workload(steps=cell["steps"])
        predicted = perf_model.predict(wl, Plan.parse(cell["plan"]), profiles[cell["gpu"]]).latency_s
        assert predicted == pytest.approx(cell["latency_s"], rel=0.05), cell


def test_shipped_profiles_match_a_fresh_fit() -> None:
    """The YAML files are the fit's output; regenerate with `python -m worldtune.policies.calibration`."""
    fresh = fit_all()
    for gpu in ("H200", "B200"):
        shipped = shipped_profile(gpu)
        for field in ("linear_tflops", "attn_tflops", "link_gbps", "half_rate_tokens", "vae_decode_s"):
            assert getattr(shipped, field) == pytest.approx(getattr(fresh[gpu], field), rel=1e-3), (
                gpu,
                field,
            )


def test_a_step_shape_worked_out_once_answers_only_for_its_own_model_workload_and_plan() -> None:
    """perf_model keeps each (model, workload, plan)'s shape across profiles: a timing asked with the cache warm, in
    another order, with other objects of equal value, or after another shape, is the timing computed afresh."""
    profile = PROFILE
    shapes = [
        (anchor_workload(model, **changes), Plan.parse(plan))
        for model in ("cosmos3-super", "cosmos3-nano")
        for changes in ({}, {"width": 832, "height": 480, "num_frames": 121})
        for plan in ("cfg2-u4", "tp4-r2", "hsdp8", "2xu2-vae2", "cfg2-tp2-u2-fp8")
    ]
    perf_model._SHAPES.clear()
    fresh = []
    for workload, plan in shapes:
        fresh.append(perf_model.timing(workload, plan, profile))
        perf_model._SHAPES.clear()
    warm = [perf_model.timing(w, p, profile) for w, p in reversed(shapes)][::-1]
    equal = [perf_model.timing(w.model_copy(), Plan.parse(str(p)), profile) for w, p in shapes]
    assert warm == fresh and equal == fresh
    assert len({t.parts for t in fresh}) == len(shapes)  # every shape its own step
