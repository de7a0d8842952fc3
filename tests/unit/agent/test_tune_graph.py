"""The agent's graph as langgraph.json exposes it, its state reducer, and the record `tune --json` prints."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from worldtune.agent.configuration import TuneOptions
from worldtune.agent.record import build_summary
from worldtune.agent.state import Outcome, TuneState, merge_deployments
from worldtune.cli_tune import _output
from worldtune.policies.search import Measurement, candidates, initial_state, record
from worldtune.tools.plans.offers import all_offers
from worldtune.tools.words.deployment import Deployment
from worldtune.tools.words.goal import Goal
from worldtune.tools.words.run_summary import RunOutcome, RunSummary
from worldtune.tools.words.workload import anchor_workload

ROOT = Path(__file__).resolve().parents[3]


def test_langgraph_json_points_at_the_compiled_graph() -> None:
    config = json.loads((ROOT / "langgraph.json").read_text())
    path, name = config["graphs"]["worldtune"].split(":")
    spec = importlib.util.spec_from_file_location("wt_graph_for_studio", ROOT / path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    graph = getattr(module, name).get_graph()
    assert {"prepare", "approve", "decide", "verify", "learn", "finish"} <= set(graph.nodes)
    edges = {(e.source, e.target) for e in graph.edges}
    assert ("verify", "learn") in edges and ("learn", "decide") in edges and ("decide", "verify") in edges


def test_deployments_reducer_adds_and_removes() -> None:
    merged = merge_deployments({"a": "wt-1"}, {"b": "wt-2"})
    assert merged == {"a": "wt-1", "b": "wt-2"}
    assert merge_deployments(merged, {"a": ""}) == {"b": "wt-2"}


def test_summary_and_json_output_carry_the_issue_keys() -> None:
    goal = Goal(workload=anchor_workload(), latency_bound_s=150, capacities=["on-demand", "spot"])
    state = initial_state(goal, all_offers("snapshot"))
    best = candidates(state)[0]
    probe = Measurement(key=best.key, kind="probe", per_step_s=best.per_step_s, fixed_s=best.fixed_s, usd=2.0)
    full = Measurement(key=best.key, kind="full", latencies_s=[best.latency_s * f for f in (0.999, 1.0, 1.001)])
    state = record(record(state, probe), full.model_copy(update={"usd": 1.0, "benchmark_id": "b1"}))
    graph_state = TuneState(
        run_id="tune-x",
        goal=goal,
        options=TuneOptions(),
        search=state,
        results=[Outcome(measurement=full.model_copy(update={"benchmark_id": "b1"}), model_s=500.0)],
        stop_reason="converged: test",
    )
    replanned = Deployment(id="wt-1", gpu="H200", plan="cfg2-u2-r2-hsdp8", previous_plans=["tp8", "cfg2-u4-hsdp8"])
    summary = build_summary(graph_state, [replanned])
    out = _output(RunOutcome(run_id="tune-x", status="completed", summary=summary))
    assert out.keys() >= {"goal", "recommendation", "measured", "predicted", "spend", "stop_reason"}
    assert out["recommendation"].keys() >= {"gpu", "plan", "replicas", "capacity", "offer"}
    figures = {"latency_p50_s", "latency_p95_s", "clips_per_hour_per_node", "usd_per_clip"}
    assert out["measured"].keys() >= figures and out["predicted"].keys() >= figures
    assert out["spend"].keys() >= {"gpu_hours", "usd", "deployments", "benchmarks"}
    assert out["spend"]["usd"] == 3.0 and out["spend"]["benchmarks"] == 1 and out["spend"]["deployments"] == 1
    assert out["spend"]["replans"] == 2 and "spend_estimate" in out  # the node-reuse benchmark reads both
    assert abs(out["measured"]["latency_p50_s"] - best.latency_s) < 0.01 * best.latency_s
    assert any(c.stage == "measured" for c in summary.candidates)
    assert RunSummary.model_validate(summary.record()) == summary  # the record's JSON reads back as the same words


def test_a_non_anchor_workload_is_tuned_and_measured_as_the_goal_says() -> None:
    from worldtune.agent.record import goal_for
    from worldtune.tools.words.workload import anchor_changes

    goal = goal_for("Nano, 480p, 121 frames, guardrails on, cheapest", TuneOptions()).goal
    wl = goal.workload
    assert (wl.model, wl.width, wl.height, wl.num_frames, wl.guardrails) == ("cosmos3-nano", 832, 480, 121, True)
    # what verify passes to start_benchmark: the fields that differ from the model's anchor, by their tool names
    assert anchor_changes(wl) == {"width": 832, "height": 480, "num_frames": 121, "guardrails": True}
    assert goal_for("Nano, 50 steps, cheapest", TuneOptions()).goal.workload.steps == 50
    assert anchor_changes(goal_for("Nano, 50 steps, cheapest", TuneOptions()).goal.workload) == {}
    assert goal_for("cheapest", TuneOptions(infra="nebius")).goal.infras == ["nebius"]


# X-Stage-Durations as the real vLLM-Omni 0.30.0 sent them (tests/integration/test_real_engine_server.py; the tiny
# Cosmos3 pipeline on one CPU rank, and REAL_ENGINE.md's Wan pipeline): seconds per stage, the engine's clocks in ms
REAL_COSMOS3 = {
    "Cosmos3OmniDiffusersPipeline.diffuse": 0.0267,
    "Cosmos3OmniDiffusersPipeline.vae.decode": 0.0406,
    "queue_wait_ms": 0.387,
    "stage_0_gen_ms": 74.68,
}
REAL_WAN = {"Wan22Pipeline.text_encoder.forward": 0.01, "Wan22Pipeline.diffuse": 0.08, "Wan22Pipeline.vae.decode": 0.03}


def test_the_queued_check_reads_the_real_servers_stage_names() -> None:
    """Issue 55 item 1: on the real server every unqueued sample was flagged (no `<Pipeline>.forward` key: the check
    read the client-side inference time against nothing), and on Cosmos3's pipeline the check could never fire."""
    from worldtune.agent.steps import pipeline_work_s, server_wait_s, waited_behind_others

    assert pipeline_work_s(REAL_COSMOS3) == pytest.approx(0.0673)  # the ms clocks are not stages
    assert pipeline_work_s(REAL_WAN) == pytest.approx(0.12)  # the text encoder is a stage of Wan's
    alone = {"ok": True, "server_time_s": 0.214, "queue_ahead": 0, "stage_durations": REAL_COSMOS3}
    # the API server's MP4 encode is in X-Inference-Time-S (0.214 s) but not in the stage's clock (74.7 ms)
    assert server_wait_s(alone) == pytest.approx(0.0747 - 0.0673, abs=1e-4)
    assert not waited_behind_others(alone)
    behind = {**alone, "stage_durations": {**REAL_COSMOS3, "stage_0_gen_ms": 141.0}}  # another clip ran first
    assert waited_behind_others(behind)
    assert not waited_behind_others({**behind, "queue_ahead": 1})
    # a server that sends no stage clock: its inference time, less its stages
    wan = {"ok": True, "server_time_s": 0.13, "queue_ahead": 0, "stage_durations": REAL_WAN}
    assert not waited_behind_others(wan) and waited_behind_others({**wan, "server_time_s": 0.3})


def test_an_answer_that_queued_behind_other_load_is_flagged_and_client_overhead_is_not() -> None:
    from worldtune.agent.steps import waited_behind_others

    stages = {"P.forward": 100.0, "P.diffuse": 90.0}
    alone = {"ok": True, "server_time_s": 101.5, "latency_s": 180.0, "queue_ahead": 0, "stage_durations": stages}
    behind = {**alone, "server_time_s": 205.0}  # the server ran someone else's clip first
    ours = {**behind, "queue_ahead": 1}  # our own request ahead: not contamination
    assert not waited_behind_others(alone)  # a slow client (time scale, busy machine) is not other load
    assert waited_behind_others(behind)
    assert not waited_behind_others(ours)
    assert not waited_behind_others({**behind, "stage_durations": {}})  # no stage times: cannot tell, not flagged


def test_a_full_run_counts_what_a_cut_attempt_answered_once_and_not_its_cut_requests() -> None:
    """Issue 39 item 6: a lane whose node was taken back goes on for the rest on the relaunched node; the answers of
    the cut attempt (kept, marked interrupted) are evidence, its requests cut in flight are not failures."""
    from worldtune.agent.steps import measurement_of
    from worldtune.policies.search import Candidate
    from worldtune.tools.mcp.results import ResultRecord
    from worldtune.tools.words.bench_spec import BenchmarkStatus

    def sample(seq: int, attempt: int, ok: bool, interrupted: bool) -> dict[str, object]:
        return {"seq": seq, "phase": "full", "attempt": attempt, "ok": ok, "interrupted": interrupted,
                "latency_s": 100.0 + seq if ok else None, "endpoint": "http://127.0.0.1:18100"}  # fmt: skip

    cut = [sample(0, 1, True, True), sample(1, 1, True, True), sample(2, 1, False, True)]  # the third was in flight
    rest = [sample(3 + i, 2, True, False) for i in range(4)]  # the relaunched node: what was left
    record = ResultRecord(
        benchmark=BenchmarkStatus(id="bm-1", status="completed", started_at=0.0),
        config={"repeats": 6, "concurrency": [1], "probe_steps": []},
        samples=cut + rest,
        sample_count=7,
    )
    cand = Candidate.model_construct(key="k")
    m = measurement_of(cand, "full", "bm-1", record)
    assert m.latencies_s == [100.0, 101.0, 103.0, 104.0, 105.0, 106.0] and m.requested == 6
    assert m.failed_requests == 0  # the request cut in flight was asked again, not failed
