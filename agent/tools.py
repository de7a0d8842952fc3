"""The agent's tools as words (issue 38): one typed method per worldtune MCP tool the agent uses.

`Tools` is what the graph's nodes and the runner call; `McpTools` is its implementation over an MCP client
session (agent/tools_client.py): the in-process server over the results database (the default: the same tool
code, the same refusals and owners as any client's) or a remote `worldtune mcp --transport http` server. Either
way every answer is validated into the tool's own result word here, once, so nothing in agent/ reads a tool's
JSON by key; a refusal is a ToolCallFailed carrying the tool's message.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol, TypeVar, cast

from pydantic import BaseModel, Field

from worldtune.agent.tools_client import ToolCallFailed, ToolsClient, open_client
from worldtune.tools.deployments.fleet_rehearsal import FleetRehearsal
from worldtune.tools.mcp.deploy import DeploymentList, DeployOutcome, TeardownOutcome
from worldtune.tools.mcp.heartbeat import RunClient
from worldtune.tools.mcp.offers import OfferList
from worldtune.tools.mcp.replan import ReplanOutcome
from worldtune.tools.mcp.results import ResultRecord
from worldtune.tools.results.compare import ResultList
from worldtune.tools.runs.run_records import RunMark, RunRecord
from worldtune.tools.words.bench_spec import BenchmarkStatus
from worldtune.tools.words.deploy_request import DeployRequest
from worldtune.tools.words.deployment import Deployment
from worldtune.tools.words.plan import Plan

M = TypeVar("M", bound=BaseModel)


class BenchmarkRequest(BaseModel):
    """A benchmark the agent starts on a deployment: its full runs, probes and the workload where it differs from
    the model's anchor (start_benchmark's arguments)."""

    steps: int = Field(ge=1, description="denoising steps of the full runs")
    repeats: int = Field(ge=1, description="requests per client per level and per probe")
    concurrency: list[int] = Field(default_factory=lambda: [1], description="closed-loop levels (clients)")
    probe_steps: list[int] = Field(default_factory=list, description="short step counts probed first")
    warmup: int = Field(default=0, ge=0, description="warm-up requests per endpoint (not counted)")
    full: bool = Field(default=True, description="the closed-loop levels after the probes (false: the probes alone)")
    workload: dict[str, Any] = Field(default_factory=dict, description="the workload's fields that differ")


class ToolCaller(Protocol):
    """An MCP client session with a `call` that returns a tool's structured answer (agent/tools_client.py)."""

    calls: list[str]

    async def call(self, tool: str, /, **arguments: Any) -> dict[str, Any]: ...


class Tools(Protocol):
    """The worldtune tools the agent uses, taking and returning words."""

    @property
    def calls(self) -> list[str]: ...

    async def list_offers(self) -> OfferList: ...
    async def get_deployment(self, deployment_id: str) -> Deployment: ...
    async def list_deployments(self, run_id: str | None = None, alive_only: bool = False) -> list[Deployment]: ...
    async def deploy(self, request: DeployRequest) -> Deployment: ...
    async def teardown(self, deployment_id: str) -> TeardownOutcome: ...
    async def replan(self, deployment_id: str, plan: Plan, hours: float | None) -> ReplanOutcome: ...
    async def start_benchmark(self, deployment_id: str, run_id: str, request: BenchmarkRequest) -> BenchmarkStatus: ...
    async def get_benchmark(self, benchmark_id: str, wait_s: float = 0.0) -> BenchmarkStatus: ...
    async def get_result(self, benchmark_id: str, include_samples: bool = False) -> ResultRecord: ...
    async def list_results(self, run_id: str, limit: int = 1000) -> ResultList: ...
    async def record_run(self, run_id: str, goal: Mapping[str, Any]) -> RunRecord: ...
    async def mark_run(self, run_id: str, status: RunMark, summary: Mapping[str, Any] | None = None) -> RunRecord: ...
    async def record_fleet(self, run_id: str, fleet: Mapping[str, Any]) -> RunRecord: ...
    async def heartbeat_run(self, run_id: str) -> RunClient: ...
    async def rehearse_fleet(
        self,
        goal: Mapping[str, Any],
        fleet: Mapping[str, Any],
        predicted_daily_cost_usd: float,
        twin_profiles: list[str],
        requests: int,
        time_scale: float,
    ) -> FleetRehearsal: ...


class McpTools:
    """`Tools` over an MCP client session: each method calls its tool and validates the answer into its word."""

    def __init__(self, caller: ToolCaller) -> None:
        self.caller = caller

    @property
    def calls(self) -> list[str]:
        """The tools called so far, in order (the session's own record)."""
        return self.caller.calls

    async def _answer(self, word: type[M], tool: str, /, **arguments: Any) -> M:
        """Call `tool` with `arguments` (a deploy's `model` among them) and read its answer as `word`."""
        return word.model_validate(await self.caller.call(tool, **arguments))

    async def list_offers(self) -> OfferList:
        return await self._answer(OfferList, "list_offers")

    async def get_deployment(self, deployment_id: str) -> Deployment:
        return await self._answer(Deployment, "get_deployment", deployment_id=deployment_id)

    async def list_deployments(self, run_id: str | None = None, alive_only: bool = False) -> list[Deployment]:
        listed = await self._answer(DeploymentList, "list_deployments", run_id=run_id, alive_only=alive_only)
        return listed.deployments

    async def deploy(self, request: DeployRequest) -> Deployment:
        outcome = await self._answer(DeployOutcome, "deploy", **request.model_dump(exclude_none=True), confirm=True)
        if outcome.deployment is None:  # confirmed, so only a server that answers oddly gets here
            raise ToolCallFailed("deploy", f"nothing was started: {outcome.message}")
        return outcome.deployment

    async def teardown(self, deployment_id: str) -> TeardownOutcome:
        return await self._answer(TeardownOutcome, "teardown", deployment_id=deployment_id, confirm=True)

    async def replan(self, deployment_id: str, plan: Plan, hours: float | None) -> ReplanOutcome:
        return await self._answer(
            ReplanOutcome, "replan_deployment", deployment_id=deployment_id, plan=str(plan), confirm=True, hours=hours
        )

    async def start_benchmark(self, deployment_id: str, run_id: str, request: BenchmarkRequest) -> BenchmarkStatus:
        arguments = request.model_dump(exclude={"workload"}) | request.workload
        return await self._answer(
            BenchmarkStatus, "start_benchmark", deployment_id=deployment_id, run_id=run_id, **arguments
        )

    async def get_benchmark(self, benchmark_id: str, wait_s: float = 0.0) -> BenchmarkStatus:
        """Status and counts only (no partial result: a poller reads get_result when samples_done grows)."""
        return await self._answer(
            BenchmarkStatus, "get_benchmark", benchmark_id=benchmark_id, wait_s=wait_s, partial=False
        )

    async def get_result(self, benchmark_id: str, include_samples: bool = False) -> ResultRecord:
        return await self._answer(
            ResultRecord, "get_result", benchmark_id=benchmark_id, include_samples=include_samples
        )

    async def list_results(self, run_id: str, limit: int = 1000) -> ResultList:
        return await self._answer(ResultList, "list_results", run_id=run_id, limit=limit)

    async def record_run(self, run_id: str, goal: Mapping[str, Any]) -> RunRecord:
        return await self._answer(RunRecord, "record_run", run_id=run_id, goal=dict(goal))

    async def mark_run(self, run_id: str, status: RunMark, summary: Mapping[str, Any] | None = None) -> RunRecord:
        return await self._answer(
            RunRecord, "mark_run", run_id=run_id, status=status, summary=dict(summary) if summary is not None else None
        )

    async def record_fleet(self, run_id: str, fleet: Mapping[str, Any]) -> RunRecord:
        return await self._answer(RunRecord, "record_fleet", run_id=run_id, fleet=dict(fleet))

    async def heartbeat_run(self, run_id: str) -> RunClient:
        return await self._answer(RunClient, "heartbeat_run", run_id=run_id)

    async def rehearse_fleet(
        self,
        goal: Mapping[str, Any],
        fleet: Mapping[str, Any],
        predicted_daily_cost_usd: float,
        twin_profiles: list[str],
        requests: int,
        time_scale: float,
    ) -> FleetRehearsal:
        return await self._answer(
            FleetRehearsal,
            "rehearse_fleet",
            goal=dict(goal),
            fleet=dict(fleet),
            requests=requests,
            predicted_daily_cost_usd=predicted_daily_cost_usd,
            twin_profiles=twin_profiles or None,
            time_scale=time_scale,
        )


def typed(tools: Tools | ToolCaller) -> Tools:
    """`tools` as `Tools`: a bare MCP client session (ToolsClient, SessionPerCall) is wrapped in McpTools."""
    if hasattr(tools, "get_result"):
        return cast("Tools", tools)
    return McpTools(tools)


HEARTBEAT_S = 2.0  # how often, at most, a remote run's client says it is there (4 beats per grace if shorter);
# the server holds the run's starts after 2.5 missed beats (tools/runs/run_heartbeat.py CLIENT_BEAT_S)


async def _heartbeat(tools: Tools, run_id: str, every_s: float) -> None:
    """Tell the server, every `every_s`, that this client is still there for `run_id` (heartbeat_run): if this
    process dies the heartbeat stops and the server abandons the run, tearing down what it started."""
    import asyncio

    while True:
        try:
            grace = (await tools.heartbeat_run(run_id)).grace_s
            if grace is not None and grace > 0:  # a few beats per grace, whatever the server's grace
                every_s = min(HEARTBEAT_S, max(0.5, grace / 4))
        except ToolCallFailed:
            return  # abandoned (or a server without the tool): the run's own next call says why
        except Exception:  # a lost beat is retried: the grace is many beats long
            pass
        await asyncio.sleep(every_s)


@contextlib.asynccontextmanager
async def connect(
    db_path: str | None = None, mcp_url: str | None = None, run_id: str | None = None
) -> AsyncIterator[Tools]:
    """A session with the worldtune MCP tools: in-process over `db_path`, or the server at `mcp_url`.

    With `mcp_url` and `run_id`, the run belongs to this session on the server: it heartbeats in the background
    while the session is open, and the server abandons the run when the beats stop or the session ends."""
    if mcp_url:
        target: Any = mcp_url
    else:
        from worldtune.tools.mcp.server import build_server

        # origin "cli": the run's twin profile was checked against its caller's allow-list when the run started.
        # No tuner: a run's own tools never start, resume or stop runs (their tools answer that they are not
        # available here), so the tools client does not import the runner that drives it.
        target = build_server(db_path, origin="cli")
    async with open_client(target) as client:
        tools = McpTools(ToolsClient(client))
        if not (mcp_url and run_id):
            yield tools
            return
        import asyncio

        beating = asyncio.create_task(_heartbeat(McpTools(ToolsClient(client)), run_id, HEARTBEAT_S))
        try:
            yield tools
        finally:
            beating.cancel()
            with contextlib.suppress(BaseException):
                await beating
