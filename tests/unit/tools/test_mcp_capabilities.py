"""The capabilities behind the MCP tools, called as plain functions with no MCP client (issue 16): the plan
frontier of list_plans, the workload and spec of start_benchmark, the summaries and comparison of results."""

from __future__ import annotations

import math
from typing import Literal

import pytest
from pydantic import ValidationError

from worldtune.policies.pareto import pareto_frontier
from worldtune.tools.bench.request import benchmark_spec, benchmark_workload, ready_endpoints, size_fields
from worldtune.tools.plans.frontier import plan_frontier
from worldtune.tools.results.compare import compare, summary_from_row, usd_per_clip
from worldtune.tools.words.bench_spec import SYNC_TIMEOUT_S, ApiKind, BenchmarkSpec, api_for
from worldtune.tools.words.deployment import Deployment
from worldtune.tools.words.errors import InvalidInput


def test_plan_frontier_filters_sorts_and_names_the_cheapest() -> None:
    everything = plan_frontier(gpu="H200", gpus=8, limit=500)
    bounded = plan_frontier(gpu="H200", gpus=8, latency_bound_s=150, limit=500)
    assert everything.goal == "" and bounded.goal
    assert 0 < bounded.meeting_goal_count < everything.meeting_goal_count == everything.valid_count
    assert all(e.latency_s is not None and e.latency_s <= 150 for e in bounded.plans)
    costs = [e.usd_per_clip if e.usd_per_clip is not None else math.inf for e in bounded.plans]
    assert costs == sorted(costs) and bounded.best == bounded.plans[0].plan
    assert bounded.frontier == [e.plan for e in pareto_frontier(bounded.plans)]
    assert everything.refused_count and all(": " in why for why in everything.refused_examples.values())


def test_plan_frontier_frontier_only_and_limit() -> None:
    front = plan_frontier(gpu="B200", gpus=8, frontier_only=True, sort="latency", limit=2)
    assert len(front.plans) <= 2 and {e.plan for e in front.plans} <= set(front.frontier)
    latencies = [e.latency_s for e in front.plans]
    assert latencies == sorted(latencies)  # type: ignore[type-var]


def test_plan_frontier_refuses_an_unknown_gpu() -> None:
    with pytest.raises(InvalidInput, match="gpu"):
        plan_frontier(gpu="Z9000")


def test_size_fields_parse_and_refuse() -> None:
    assert size_fields(None, None, None) == {}
    assert size_fields("832X480", None, 480) == {"width": 832, "height": 480}
    with pytest.raises(InvalidInput, match=r"size='720p' is not valid: WIDTHxHEIGHT"):
        size_fields("720p", None, None)
    with pytest.raises(InvalidInput, match=r"width=640 is not valid: 832 as size='832x480' says"):
        size_fields("832x480", 640, None)


def test_benchmark_workload_changes_only_what_is_given() -> None:
    workload = benchmark_workload("cosmos3-super", size="832x480", num_frames=121, guardrails=None)
    assert (workload.width, workload.height, workload.num_frames) == (832, 480, 121)
    assert workload.guardrails is False  # the anchor's value: None means "leave it"
    with pytest.raises(ValidationError):
        benchmark_workload("cosmos3-super", fps=7)


def test_a_guarded_workload_is_refused_on_a_deployment_without_guardrails() -> None:
    """vLLM-Omni started with --no-guardrails skips a request's guardrails: it would be measured as guarded."""
    ready = Deployment(gpu="H200", plan="cfg2-u4-hsdp8", state="ready", endpoints=["http://127.0.0.1:1"])
    guarded = benchmark_workload("cosmos3-super", guardrails=True)
    with pytest.raises(InvalidInput, match=r"guardrails=True is not valid: a deployment started with guardrails"):
        benchmark_spec(ready, guarded, 35, 2, (1,), (4,), 0)
    on = ready.model_copy(update={"guardrails": True})
    assert benchmark_spec(on, guarded, 35, 2, (1,), (4,), 0).workload.guardrails
    assert not benchmark_spec(on, benchmark_workload("cosmos3-super"), 35, 2, (1,), (4,), 0).workload.guardrails


def test_benchmark_spec_needs_a_ready_deployment_and_predicts_its_timeout() -> None:
    pending = Deployment(gpu="H200", plan="cfg2-u4-hsdp8", run_id="run-1")
    with pytest.raises(InvalidInput, match=r"deployment_id='wt-.*' is not valid: it is pending, not ready"):
        ready_endpoints(pending)
    ready = pending.model_copy(update={"state": "ready", "endpoints": ["http://127.0.0.1:1"]})
    spec = benchmark_spec(ready, benchmark_workload("cosmos3-super"), 35, 2, (1, 2), (4, 8), 0)
    assert spec.endpoints == ["http://127.0.0.1:1"] and spec.concurrency == [1, 2]
    assert spec.run_id == "run-1" and spec.deployment_id == ready.id
    assert spec.expected_latency_s is not None and spec.expected_latency_s > 0


def test_a_clip_that_could_outlast_the_sync_timeout_is_measured_through_jobs() -> None:
    """Issue 39 item 5: the API follows the prediction: the anchor clip on one H200 (~820 model-s) and a queue of
    clips past two thirds of the 600 s sync timeout go through the job API; a 70 s clip one at a time stays sync."""

    def spec(plan: str, concurrency: tuple[int, ...] = (1,), api: ApiKind | Literal["auto"] = "auto") -> BenchmarkSpec:
        ready = Deployment(gpu="H200", plan=plan, state="ready", endpoints=["http://127.0.0.1:1"])
        return benchmark_spec(ready, benchmark_workload("cosmos3-super"), 35, 2, concurrency, (4, 8), 0, api=api)

    one_gpu = spec("1gpu")
    assert one_gpu.expected_latency_s is not None and one_gpu.expected_latency_s > SYNC_TIMEOUT_S
    assert one_gpu.api == "async"
    fast = spec("cfg2-u4-hsdp8")
    assert fast.expected_latency_s is not None and fast.expected_latency_s < SYNC_TIMEOUT_S / 3 and fast.api == "sync"
    assert spec("cfg2-u4-hsdp8", (8,)).api == "async"  # eight clients queue on one server: the last waits 7 clips
    assert spec("1gpu", api="sync").api == "sync"  # asked for: as asked
    assert api_for(None) == "sync" and api_for(401.0) == "async" and api_for(399.0) == "sync"


def test_a_probe_at_the_goals_steps_goes_through_jobs_where_that_clip_could_outlast_the_sync_timeout() -> None:
    """A search's probe asks at 4 steps and at the goal's (policies/search/words.probe_steps): on one H200 its
    35-step requests take ~820 model-s, so the probe goes through the job API though its first step count is short;
    the same probe at 4 and 8 steps, and on a fast plan, stays sync."""

    def probe(plan: str, steps: tuple[int, ...]) -> BenchmarkSpec:
        ready = Deployment(gpu="H200", plan=plan, state="ready", endpoints=["http://127.0.0.1:1"])
        return benchmark_spec(ready, benchmark_workload("cosmos3-super"), steps[0], 2, (1,), steps, 1, full=False)

    assert probe("1gpu", (4, 35)).api == "async"
    assert probe("1gpu", (4, 8)).api == "sync"
    assert probe("cfg2-u4-hsdp8", (4, 35)).api == "sync"


def test_compare_and_summaries_of_stored_rows() -> None:
    rows = [
        {"id": "b1", "status": "completed", "started_at": 1.0, "deployment_id": "d1",
         "result": {"latency_mean": 100.0, "clips_per_hour": 36.0, "latency_p95": float("nan")}},
        {"id": "b2", "status": "completed", "started_at": 2.0, "deployment_id": None,
         "result": {"latency_mean": 80.0, "clips_per_hour": 45.0}},
    ]  # fmt: skip
    priced = Deployment(id="d1", gpu="H200", plan="tp8", usd_per_hour=36.0)
    assert usd_per_clip(rows[0]["result"], priced) == pytest.approx(1.0)  # type: ignore[arg-type]
    assert usd_per_clip(rows[1]["result"], None) is None  # type: ignore[arg-type]
    figures = {f.key: f for f in compare(rows, {"d1": priced}).figures}
    assert figures["latency_mean"].change_vs_first == [0.0, pytest.approx(-0.2)]
    assert figures["usd_per_clip"].values == [pytest.approx(1.0), None]
    summary = summary_from_row(rows[0])
    assert summary.latency_mean == 100.0 and summary.latency_p95 is None  # a non-finite figure is not a number
