"""The MCP tools over tuning runs: start_tuning, get_tuning, approve_tuning.

Thin wrappers over the tuning-jobs capability (tools/runs/tuning_jobs.py), which records each run and runs it on
the Tuner the server is built with (build_server(tuner=AgentTuner())), so tools/ never imports the agent.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any, Literal

import anyio
import anyio.to_thread
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field

from worldtune.tools.mcp.common import (
    DECIDES,
    READ_ONLY,
    STARTS,
    InfraArg,
    allowed_profile,
    refusals,
    tool,
)
from worldtune.tools.mcp.heartbeat import GraceArg, HoldHoursArg, bind_here
from worldtune.tools.mcp.session import session_of
from worldtune.tools.words.limits import MAX_BUDGET_USD
from worldtune.tools.words.tuning import SpendEstimate

if TYPE_CHECKING:
    from worldtune.tools.mcp.session import Session
    from worldtune.tools.words.tuning import Tuner


class TuningStatus(BaseModel):
    """Where a tuning run stands (the agent's record and its last checkpoint)."""

    run_id: str
    status: str = Field(description="running | completed | failed | waiting (for approval) | ...")
    waiting_for_approval: bool = Field(default=False, description="answer with approve_tuning")
    spend_estimate: SpendEstimate | None = Field(
        default=None, description="what the run expects to spend, shown before approval"
    )
    spent_usd: float = 0.0
    measurements: int = 0
    stop_reason: str | None = None
    events: list[str] = Field(default_factory=list, description="the last events of the run, one line each")
    summary: dict[str, Any] | None = Field(default=None, description="the recommendation and evidence, once done")
    error: str | None = None
    note: str | None = None


def tuner(session: Session) -> Tuner:
    """The Tuner the server was built with; refused when it was built without the agent."""
    if session.tuner is None:
        raise ToolError("tuning is not available on this server: it was built without the agent "
                        "(build_server(tuner=AgentTuner()); `worldtune mcp` includes it)")  # fmt: skip
    return session.tuner


def tuning_status(session: Session, run_id: str) -> TuningStatus:
    """A run's status from its record and its Tuner, typed."""
    from worldtune.tools.runs import tuning_jobs

    with refusals():
        driver = tuner(session)  # refused before the database is opened on a server built without the agent
        return TuningStatus.model_validate(tuning_jobs.tuning_status(session.store, driver, run_id))


@tool("Start a tuning run", STARTS)
def start_tuning(
    ctx: Context,
    goal: Annotated[
        str,
        Field(
            min_length=3,
            description="the goal in words, e.g. 'Cosmos3-Super, 720p 189-frame clips, p95 under 150 s, "
            "cheapest per clip, H200 or B200, spot ok, budget $300'",
        ),
    ],
    infra: InfraArg = "local",
    engine: Annotated[Literal["twin", "vllm-omni"], Field(description="twin (rehearsal) or vllm-omni")] = "twin",
    twin_profile: Annotated[
        str | list[str] | None,
        Field(description="twin only: profile YAML files or folders the twin runs with, one per GPU type"),
    ] = None,
    time_scale: Annotated[float, Field(gt=0, le=100000, description="twin only: divide its sleeps by this")] = 300.0,
    budget_usd: Annotated[
        float | None,
        Field(gt=0, le=MAX_BUDGET_USD, allow_inf_nan=False, description="overrides the goal's budget"),
    ] = None,
    confidence: Annotated[
        float | None,
        Field(gt=0.5, le=0.999, description="overrides the goal's confidence (claim and stopping rule), e.g. 0.99"),
    ] = None,
    max_iterations: Annotated[int, Field(ge=1, le=200, description="most measurements")] = 30,
    confirm: Annotated[
        bool,
        Field(description="approve the run's spend up front; without it a paid run stops at the approval question"),
    ] = False,
    detach: Annotated[
        bool,
        Field(description="keep running after this MCP session ends (else the run stops and tears down with it)"),
    ] = False,
    grace_s: GraceArg = None,
    hold_hours: HoldHoursArg = None,
) -> TuningStatus:
    """Start the tuning agent on a goal and return its run id at once: it predicts, deploys, benchmarks,
    recalibrates and recommends the cheapest deployment that meets the goal, tearing down what it started.

    On infra local with the twin it spends nothing and runs without asking. Anywhere else it stops at an
    approval question showing its spend estimate unless confirm=true (answer with approve_tuning). An
    ambiguous goal is refused with the questions to answer. Poll get_tuning for progress and the result.
    The run belongs to this MCP session: when the session ends, or no call carrying the run id (get_tuning,
    heartbeat_run) comes for grace_s, it is stopped, everything it started torn down, and marked abandoned
    (samples kept); unless detach=true, and then, with hold_hours, only after that long unheard.
    """
    session = session_of(ctx)
    from worldtune.tools.plans.spend import needs_confirmation
    from worldtune.tools.runs import run_heartbeat, tuning_jobs
    from worldtune.tools.words.traffic import goal_traces
    from worldtune.tools.words.tuning import TuningRequest

    # the tuner checks the budget (this argument, or the goal text's) and the infra against the guardrails
    with refusals():
        paid = needs_confirmation(infra, engine)
        goal = goal_traces(goal, session.origin)  # a trace the goal names must be a file this client may name
        # each rehearsal truth must be a file this client may name (tools/plans/profile_paths.py; no folders over MCP)
        if isinstance(twin_profile, list):
            twin_profile = [p for p in (allowed_profile(session, x, "twin_profile") for x in twin_profile) if p]
        else:
            twin_profile = allowed_profile(session, twin_profile, "twin_profile")
        request = TuningRequest(
            infra=infra, engine=engine, twin_profile=twin_profile, time_scale=time_scale, budget_usd=budget_usd,
            confidence=confidence, max_iterations=max_iterations, yes=confirm or not paid, db_path=session.db_path,
            detach=detach,
        )  # fmt: skip
        driver = tuner(session)
        if hold_hours is not None and not detach:  # refused before anything starts (bind_here would, too late)
            raise ToolError(f"hold_hours={hold_hours!r} is not valid: only with detach=true")
        run_heartbeat.check_grace(grace_s)
        run_id = tuning_jobs.start_tuning(session.store, driver, goal, request)
    bind_here(session, ctx, run_id, grace_s, detach, hold_hours)  # the run belongs to this session from now on
    return tuning_status(session, run_id)


@tool("Get a tuning run", READ_ONLY)
async def get_tuning(
    ctx: Context,
    run_id: Annotated[str, Field(description="id returned by start_tuning")],
    wait_s: Annotated[
        float, Field(ge=0, le=600, description="wait up to this long for it to finish, reporting progress")
    ] = 0.0,
) -> TuningStatus:
    """A tuning run's status, what it did so far (events, measurements, spend), whether it waits for approval,
    and once completed its recommendation with the measured and predicted figures."""
    session = session_of(ctx)
    deadline = time.monotonic() + wait_s
    while True:
        status = await anyio.to_thread.run_sync(lambda: tuning_status(session, run_id))
        if status.status != "running" or time.monotonic() >= deadline:
            return status
        last = status.events[-1] if status.events else "running"
        await ctx.report_progress(float(status.measurements), None, str(last))
        await anyio.sleep(min(0.5, max(0.0, deadline - time.monotonic())))


@tool("Approve or stop a tuning run", DECIDES)
def approve_tuning(
    ctx: Context,
    run_id: Annotated[str, Field(description="a run waiting for approval (get_tuning says so)")],
    approve: Annotated[bool, Field(description="true: go ahead and spend; false: stop the run")],
) -> TuningStatus:
    """Answer a tuning run's approval question: approve its spend estimate (it continues) or decline (it stops)."""
    session = session_of(ctx)
    current = tuning_status(session, run_id)
    if not current.waiting_for_approval:
        raise ToolError(f"run_id={run_id!r} is not valid: it is {current.status}, not waiting for approval")
    from worldtune.tools.runs import tuning_jobs

    with refusals():
        tuning_jobs.resume_tuning(session.store, tuner(session), run_id, approve, session.db_path)
    return tuning_status(session, run_id)
