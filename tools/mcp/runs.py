"""The MCP tools over a tuning run's record: record_run, mark_run, record_fleet (tools/runs/run_records.py).

The agent's graph writes its run's record through these, so the record lives with the server it drives.
"""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server.mcpserver import Context
from pydantic import Field

from worldtune.tools.mcp.common import RECORDS, refusals, tool
from worldtune.tools.mcp.session import session_of
from worldtune.tools.runs import run_records
from worldtune.tools.runs.run_records import RunMark, RunRecord

RunIdArg = Annotated[str, Field(min_length=1, max_length=100, description="the run's id (its checkpoint thread id)")]


@tool("Record a tuning run", RECORDS)
def record_run(
    ctx: Context,
    run_id: RunIdArg,
    goal: Annotated[dict[str, Any], Field(description="the goal the run works to, as the Goal model reads it")],
) -> RunRecord:
    """Open a tuning run's record in the results database (status running); the same run and goal again is a
    no-op. The agent calls it when it has read its goal; get_tuning and `worldtune report` read it back."""
    session = session_of(ctx)
    with refusals():
        return run_records.record_run(session.store, run_id, goal)


@tool("Mark a tuning run", RECORDS)
def mark_run(
    ctx: Context,
    run_id: RunIdArg,
    status: Annotated[RunMark, Field(description="where the run stands now")],
    summary: Annotated[
        dict[str, Any] | None,
        Field(description="waiting: {'spend_estimate': ...}; ended: the recommendation and evidence or the error"),
    ] = None,
) -> RunRecord:
    """Mark a recorded run as waiting for approval, running again, completed, interrupted or failed, with its
    summary. Ended and waiting runs let their deployments go to `worldtune gc`; a run marked running is owned
    by this server from now on."""
    session = session_of(ctx)
    with refusals():
        return run_records.mark_run(session.store, run_id, status, summary)


@tool("Record a run's fleet", RECORDS)
def record_fleet(
    ctx: Context,
    run_id: RunIdArg,
    fleet: Annotated[
        dict[str, Any],
        Field(
            description="the fleet for the goal's traffic: plan_capacity's plan under 'capacity', rehearse_fleet's "
            "answer under 'rehearsal', as `worldtune tune` keeps it"
        ),
    ],
) -> RunRecord:
    """Put a fleet (planned and rehearsed for the run's traffic) into a recorded run's summary, where
    `worldtune report` and write_report draw its day from; writing it again replaces it."""
    session = session_of(ctx)
    with refusals():
        return run_records.record_fleet(session.store, run_id, fleet)
