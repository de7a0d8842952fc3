"""Two clocks (issue 37): the server's generation time (vLLM-Omni's stage time, X-Inference-Time-S) and a client's
end-to-end time of one sync request; every published cell fitted on its own clock; what overlaps under queueing;
and a fit held within what the hardware can do."""

from __future__ import annotations

import asyncio

import pytest

from worldtune.policies import perf_model
from worldtune.policies.calibration import load_published, published_observations, shipped_profile
from worldtune.policies.calibration_fit import LatencyObs, on_clock, predict_obs
from worldtune.tools.plans.estimate import estimate
from worldtune.tools.twin.engine import TwinConfig, TwinEngine, TwinRequest
from worldtune.tools.words.plan import Plan
from worldtune.tools.words.workload import anchor_workload


@pytest.mark.parametrize(("gpu", "plan"), [("H200", "cfg2-u4-hsdp8"), ("H200", "tp8"), ("B200", "1gpu")])
def test_the_client_clock_is_the_server_clock_plus_what_happens_outside_the_engine(gpu: str, plan: str) -> None:
    profile = shipped_profile(gpu)
    wl = anchor_workload()
    p = perf_model.predict(wl, Plan.parse(plan), profile)
    assert p.server_s == pytest.approx(p.fixed_s + wl.steps * p.per_step_s + p.guardrail_s)
    assert p.client_overhead_s == pytest.approx(profile.client_overhead_s) and profile.client_overhead_s > 0
    assert p.latency_s == pytest.approx(p.server_s + p.client_overhead_s)
    # the engine runs one request at a time: none of the server's time overlaps the next request
    assert p.service_s == pytest.approx(max(p.latency_s - perf_model.overlap_s(wl, profile), wl.steps * p.per_step_s))
    assert p.service_s >= p.server_s - 1e-9


def test_the_encode_and_transfer_grow_with_the_clip() -> None:
    profile = shipped_profile("H200")
    small = anchor_workload().with_changes(width=832, height=480, num_frames=93)
    p = perf_model.predict(small, Plan.parse("cfg2-u4-hsdp8"), profile)
    assert p.client_overhead_s == pytest.approx(profile.client_overhead_s * (832 * 480 * 93) / (1280 * 720 * 189))


def test_a_profile_from_before_the_two_clocks_keeps_one_clock() -> None:
    old = shipped_profile("H200").with_changes(client_overhead_s=0.0, pipelined_s=10.43)
    p = perf_model.predict(anchor_workload(), Plan.parse("cfg2-u4-hsdp8"), old)
    assert p.latency_s == p.server_s and p.service_s == pytest.approx(p.latency_s - 10.43)


def test_estimate_reports_both_clocks_with_their_parts() -> None:
    e = estimate(gpu="B200", plan="cfg2-u4-hsdp8")
    assert e.server_s is not None and e.client_s is not None and e.client_overhead_s is not None
    assert e.latency_s == e.client_s == pytest.approx(e.server_s + e.client_overhead_s)
    assert e.fixed_s is not None and e.per_step_s is not None
    assert e.server_s == pytest.approx(e.fixed_s + e.steps * e.per_step_s + (e.guardrail_s or 0.0))
    dumped = e.model_dump(mode="json")
    assert {"server_s", "client_s", "client_overhead_s", "latency_s"} <= dumped.keys()


def test_every_published_cell_has_a_clock_and_is_fitted_on_it() -> None:
    data = load_published()
    assert all(cell["clock"] in ("server", "wall") for cell in data["cells"])
    for gpu in ("H200", "B200"):
        profile = shipped_profile(gpu)
        for obs in published_observations(gpu, data):
            if not isinstance(obs, LatencyObs):
                continue
            p = perf_model.predict(obs.workload, obs.plan, profile)
            assert on_clock(p, obs.clock) == (p.server_s if obs.clock == "server" else p.latency_s)
            [(predicted, measured, _)] = predict_obs(obs, profile)
            assert abs(predicted / measured - 1) < 0.02, obs.label
            if obs.clock == "wall":  # the same cell read as server time would be off by the client's seconds
                assert p.server_s < measured - 0.5 * profile.client_overhead_s


def test_a_cell_without_a_clock_is_refused() -> None:
    data = load_published()
    data["cells"] = [{k: v for k, v in c.items() if k != "clock"} if c["gpu"] == "B200" else c for c in data["cells"]]
    with pytest.raises(ValueError, match="clock"):
        published_observations("B200", data)


def test_the_twin_reports_server_time_and_answers_a_client_later() -> None:
    engine = TwinEngine(TwinConfig(time_scale=1e6, load_time_s=0.0, guardrails=False),
                        shipped_profile("H200").with_changes(noise_cv=0.0))  # fmt: skip
    request = TwinRequest(prompt="a cat", width=1280, height=720, num_frames=9, fps=24.0, steps=4, guidance_scale=6.0,
                          flow_shift=10.0, seed=0, negative_prompt="", max_sequence_length=512,
                          guardrails=False)  # fmt: skip
    timing = engine._timing(engine.workload_for(request))

    async def main() -> list[tuple[float, float]]:
        done = await asyncio.gather(*(engine.generate(request) for _ in range(3)))
        return [(g.inference_time_s, float(g.done_at_model_s or 0.0)) for g in done]

    done = asyncio.run(main())
    assert timing.client > 0 and done[0][0] == pytest.approx(timing.server)  # X-Inference-Time-S: the server's
    # queued: the next request starts as the engine lets go, so clips come one server time apart, and the client's
    # answer comes its client time after its server time ends
    assert done[1][1] - done[0][1] == pytest.approx(timing.server, abs=1e-3)
    assert done[2][1] - done[1][1] == pytest.approx(timing.server, abs=1e-3)


def test_a_fit_never_puts_a_term_past_what_the_hardware_can_do() -> None:
    """Issue 37 item 2: a cell that asks for more than the hardware can do (tensor parallel 25% faster than
    published) leaves the link at NVLink's per-direction peak and the rates at the datasheet's, and says so."""
    from worldtune.policies.calibration import fit_published, prior_profile
    from worldtune.policies.calibration_fit import fit_profile
    from worldtune.tools.words.gpus import get_gpu

    data = load_published()
    data["cells"] = [dict(c, latency_s=c["latency_s"] * 0.75) if c["plan"] == "tp8" else c for c in data["cells"]]
    base, priors = prior_profile("H200")
    fitted = fit_profile(base, published_observations("H200", data), priors, "test")
    spec = get_gpu("H200")
    assert fitted.link_gbps <= spec.link_gbps * (1 + 1e-9)
    assert fitted.linear_tflops <= spec.bf16_tflops and fitted.attn_tflops <= spec.bf16_tflops
    assert "physical limit" in fitted.basis["link_gbps"].source
    shipped = fit_published("H200")  # the published cells ask for nothing past the limits
    assert "physical limit" not in shipped.basis["link_gbps"].source and shipped.link_gbps < spec.link_gbps
