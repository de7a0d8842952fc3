"""The claim over lanes on a twin is decided on the lanes' model clocks, not in the order answers reach the agent
(agent/claim_run._decided_on_model_clock): a loaded machine that delays one lane's answers changes neither where
the claim fails, nor which answers count, nor what each lane is billed (issue 35 item 4)."""

from __future__ import annotations

from typing import Any

from worldtune.agent.claim_run import Lane, _decided_on_model_clock
from worldtune.tools.mcp.results import ResultRecord
from worldtune.tools.words.bench_spec import BenchmarkStatus
from worldtune.tools.words.deployment import Deployment
from worldtune.tools.words.goal import Goal
from worldtune.tools.words.sample import Sample
from worldtune.tools.words.workload import anchor_workload

GOAL = Goal(workload=anchor_workload(), latency_bound_s=150.0, gpus=["H200"], confidence=0.95)


def lane(name: str, server_times: list[float], running: bool = True) -> Lane:
    """A one-replica lane whose run answered these requests (the client's model seconds on the twin), in order."""
    samples = [
        Sample(
            seq=i,
            phase="full",
            endpoint=f"http://{name}",
            ok=True,
            server_time_s=t - 3.5,
            twin_client_s=t,
            latency_s=t + 3.0,
        ).record()
        for i, t in enumerate(server_times)
    ]
    d = Deployment(gpu="H200", plan="cfg2-u4-vae8", infra="local", time_scale=300.0)
    record = ResultRecord(benchmark=BenchmarkStatus(id=f"bm-{name}", status="running", started_at=0.0), config={},
                          samples=samples, sample_count=len(samples))  # fmt: skip
    out = Lane(deployment=d, start_s=100.0, requests=30, records={f"bm-{name}": record})
    out.running = running
    return out


def decide(lanes: list[Lane]) -> Any:
    return _decided_on_model_clock(lanes, GOAL, replicas=1)


def test_the_claim_fails_at_the_first_answer_past_what_it_allows_in_model_time_whatever_arrived_first() -> None:
    fast = [110.0, 120.0, 160.0, 115.0, 118.0]  # above the bound at 390 model-s into the run
    slow = [125.0, 170.0, 112.0]  # above the bound at 295 model-s: earlier on the model clock
    # an idle machine: both lanes' answers are in up to the cut
    idle = [lane("a", fast), lane("b", slow)]
    # a loaded one: lane a raced ahead (more answers in), lane b's answers came late but cover the cut
    loaded = [lane("a", [*fast, 119.0, 121.0, 190.0]), lane("b", slow)]
    for lanes in (idle, loaded):
        cut_s, reason = decide(lanes)
        assert cut_s == 295.0, cut_s
        assert "1 of 4 samples above 150 s" in reason, reason  # the answers done by 295 model-s
        for each in lanes:
            each.cut_s = cut_s
        assert sorted(x for each in lanes for x in each.latencies(None)) == [110.0, 120.0, 125.0, 170.0]
        assert [each.busy_s() for each in lanes] == [295.0, 295.0]  # both billed up to the cut, not what came after


def test_a_lane_that_has_not_answered_past_the_cut_keeps_the_claim_open() -> None:
    # lane a has an answer above the bound at 160 model-s; lane b has answered only up to 100 model-s and might
    # still hold an earlier one: nothing is decided yet
    lanes = [lane("a", [160.0]), lane("b", [100.0])]
    assert decide(lanes) is None
    # once lane b answers past 160 model-s (or its run has ended), the cut is settled where its answers put it
    lanes = [lane("a", [160.0]), lane("b", [100.0, 155.0])]
    assert decide(lanes)[0] == 160.0
    lanes = [lane("a", [160.0]), lane("b", [100.0, 30.0])]  # b's run ended at 130 model-s, under the bound
    lanes[1].running = False
    assert decide(lanes)[0] == 160.0


def test_answers_under_the_bound_never_decide() -> None:
    assert decide([lane("a", [100.0] * 20), lane("b", [140.0] * 20, running=False)]) is None
