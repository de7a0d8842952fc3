"""Issue 56 item 1: an engine that dies after its deployment is ready but before the probe's benchmark starts fails
that action, never the run.

Deterministic: the real MCP tools over a real database deploy a real twin (the local backend's processes), and the
test's Tools wrapper SIGKILLs the twin's processes the moment `deploy` answers ready, and waits until they are gone,
before handing the deployment on; start_benchmark then finds it failed and refuses. Before the change verify raised
the refusal and the runner stopped the whole run (exit 2, "invalid input").
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from langgraph.runtime import Runtime

from worldtune.agent.configuration import Context, TuneOptions
from worldtune.agent.state import VerifyTask
from worldtune.agent.tools import McpTools
from worldtune.agent.tools_client import ToolsClient
from worldtune.agent.verify import verify
from worldtune.policies.search import Action, candidates, initial_state
from worldtune.tools.mcp.server import build_server
from worldtune.tools.plans.offers import all_offers
from worldtune.tools.store.database import Store
from worldtune.tools.words.goal import Goal
from worldtune.tools.words.workload import anchor_workload

pytestmark = pytest.mark.integration


class EngineDiesWhenReady:
    """The run's Tools, except that every deployment's engine is killed as soon as it is ready (SIGKILL to its
    twin processes, waited until they are gone): the window between a deployment's readiness and its benchmark."""

    def __init__(self, inner: McpTools) -> None:
        self.inner = inner
        self.killed: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def deploy(self, request: Any) -> Any:
        deployment = await self.inner.deploy(request)
        assert deployment.state == "ready" and deployment.handle and deployment.handle.pids
        for pid in deployment.handle.pids:
            os.kill(pid, signal.SIGKILL)
            self.killed.append(pid)
        deadline = time.monotonic() + 60
        while any(_alive(pid) for pid in deployment.handle.pids):
            assert time.monotonic() < deadline, "the killed twin did not go"
            await asyncio.sleep(0.05)
        return deployment


def _alive(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reap it if it is our child
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_an_engine_dead_between_ready_and_its_probe_fails_the_action_not_the_run(tmp_path: Path) -> None:
    db = tmp_path / "wt.db"
    goal = Goal(workload=anchor_workload(), latency_bound_s=150, capacities=["on-demand", "spot"])
    cand = candidates(initial_state(goal, all_offers("snapshot")))[0]
    action = Action(key=cand.key, kind="probe", expected_usd=2.0, expected_s=60.0, needs_deploy=True, reason="")
    options = TuneOptions(db_path=str(db), yes=True, time_scale=2000.0)
    Store(db).add_run("tune-dies", "tune")
    task = VerifyTask(
        run_id="tune-dies", goal=goal, options=options, action=action, candidate=cand, deployment_id=None,
        cap_usd=50.0, iteration=1, used_benchmarks=[], billed_deployments=[],
    )  # fmt: skip

    async def main() -> tuple[dict[str, Any], EngineDiesWhenReady]:
        from mcp import Client

        async with Client(build_server(str(db))) as client:
            tools = EngineDiesWhenReady(McpTools(ToolsClient(client)))
            runtime = Runtime(context=Context(tools=tools))  # type: ignore[arg-type]
            return await verify(task, runtime), tools

    update, tools = asyncio.run(main())
    assert tools.killed, "the engine was not killed: the window was not reproduced"
    (outcome,) = update["results"]
    assert outcome.failed and "benchmark refused" in (outcome.error or "") and "not ready" in (outcome.error or "")
    assert outcome.measurement.usd > 0  # its start is billed: the node ran until it died
    assert update.get("deployments", {}).get(cand.key, "") == ""  # not handed on as live
    store = Store(db)
    assert [d.state for d in store.list_deployments()] in (["failed"], ["terminated"])
    assert store.list_benchmarks() == []  # nothing was started against the dead engine
