"""Resume never repeats or drops a finished measurement (issue 12 item 7): a full benchmark that completed just
before a kill, on a deployment torn down since, is found in the database and used once, with its spend (the
deployment's start and the busy time) counted. The real MCP tools over a real results database; the records
are written as a killed run leaves them (nothing needs to run: the point is that nothing is started again)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from worldtune.agent.configuration import Context, TuneOptions
from worldtune.agent.state import VerifyTask
from worldtune.agent.steps import bill, finished_benchmark
from worldtune.agent.tools import McpTools
from worldtune.agent.tools_client import ToolsClient
from worldtune.agent.verify import start_s, verify
from worldtune.policies.search import Action, Candidate, candidates, initial_state
from worldtune.tools.mcp.server import build_server
from worldtune.tools.plans.offers import all_offers
from worldtune.tools.results.compute import compute_result
from worldtune.tools.store.database import Store
from worldtune.tools.words.deployment import Deployment
from worldtune.tools.words.goal import Goal
from worldtune.tools.words.workload import anchor_workload

RUN = "tune-killed"


def full_action(cand: Candidate) -> Action:
    return Action(key=cand.key, kind="full", expected_usd=5.0, expected_s=100.0, needs_deploy=True, reason="")


def killed_run_left(db: Path, cand: Candidate) -> None:
    """A deployment torn down by the run's cleanup, and the full benchmark that completed on it just before."""
    store = Store(db)
    store.add_run(RUN, "tune")
    t0 = time.time() - 60
    store.save_deployment(
        Deployment(id="wt-old", run_id=RUN, gpu=cand.gpu, plan=cand.plan, capacity=cand.capacity, state="terminated",
                   created_at=t0, ready_at=t0 + 2, terminated_at=t0 + 10)
    )  # fmt: skip
    store.create_benchmark("bm-done", {"probe_steps": [], "steps": 35}, deployment_id="wt-old", run_id=RUN)
    samples = [
        {"phase": "full", "steps": 35, "concurrency": 1, "endpoint": "http://127.0.0.1:1", "ok": True,
         "latency_s": 100.0 + i, "server_time_s": 96.0 + i, "twin_client_s": 99.0 + i, "sent_at": t0 + 3 + i,
         "queue_ahead": 0,
         "sent_at_model": 200.0 * i, "done_at_model": 200.0 * i + 100.0 + i}
        for i in range(5)
    ]  # fmt: skip
    for seq, sample in enumerate(samples):
        store.add_sample("bm-done", seq, sample)
    result = compute_result(samples, benchmark_id="bm-done", steps=35)
    store.update_benchmark("bm-done", status="completed", progress=1.0, result=result.model_dump(mode="json"))


def test_a_full_run_finished_before_the_kill_is_used_not_repeated(tmp_path: Path) -> None:
    db = tmp_path / "wt.db"
    goal = Goal(workload=anchor_workload(), latency_bound_s=150, capacities=["on-demand", "spot"])
    cand = candidates(initial_state(goal, all_offers("snapshot")))[0]
    killed_run_left(db, cand)
    options = TuneOptions(db_path=str(db), yes=True)
    task = VerifyTask(
        run_id=RUN, goal=goal, options=options, action=full_action(cand), candidate=cand, deployment_id=None,
        cap_usd=50.0, iteration=3,
        used_benchmarks=[], billed_deployments=[],
    )  # fmt: skip
    seen: list[str] = []

    async def main() -> tuple[dict[str, Any], list[str], Any]:
        from mcp import Client

        async with Client(build_server(str(db))) as client:
            tools = McpTools(ToolsClient(client))
            runtime = Runtime(context=Context(tools=tools, progress=lambda kind, data: seen.append(kind)))
            update = await verify(task, runtime)
            again = await finished_benchmark(tools, RUN, cand, "full", used=["bm-done"])
            stored = await tools.get_deployment("wt-old")
        return update, tools.calls, (again, stored)

    update, calls, (again, stored) = asyncio.run(main())
    (outcome,) = update["results"]
    measured = outcome.measurement
    assert measured.benchmark_id == "bm-done" and not outcome.failed
    assert measured.latencies_s == [99.0, 100.0, 101.0, 102.0, 103.0]  # every sample, the client's model seconds
    assert "deploy" not in calls and "start_benchmark" not in calls  # nothing started again
    assert "reuse" in seen and update["deployments"] == {}  # it is gone: not handed on as live
    # billed once: the deployment's start (no recorded result billed it) plus the busy time of its requests
    expected_s = start_s(stored, cand, options) + sum(99.0 + i for i in range(5))
    assert abs(outcome.model_s - expected_s) < 1e-6 and measured.usd == bill(cand, expected_s)[0] > 0
    assert again is None  # once the run's record holds it, it is never taken for a second measurement


def test_a_deployment_already_billed_by_a_recorded_result_is_not_billed_again(tmp_path: Path) -> None:
    db = tmp_path / "wt.db"
    goal = Goal(workload=anchor_workload(), latency_bound_s=150, capacities=["on-demand", "spot"])
    cand = candidates(initial_state(goal, all_offers("snapshot")))[0]
    killed_run_left(db, cand)
    options = TuneOptions(db_path=str(db), yes=True)
    task = VerifyTask(
        run_id=RUN, goal=goal, options=options, action=full_action(cand), candidate=cand, deployment_id=None,
        cap_usd=50.0, iteration=3,
        used_benchmarks=["bm-probe-of-it"], billed_deployments=["wt-old"],  # its probe was recorded and billed it
    )  # fmt: skip

    async def main() -> dict[str, Any]:
        from mcp import Client

        async with Client(build_server(str(db))) as client:
            runtime = Runtime(context=Context(tools=ToolsClient(client)))
            return await verify(task, runtime)

    (outcome,) = asyncio.run(main())["results"]
    assert abs(outcome.model_s - sum(99.0 + i for i in range(5))) < 1e-6
