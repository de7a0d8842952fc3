"""The MCP tools: thin, typed wrappers over worldtune's plain functions, registered on the server.

Every tool's parameters are flat and named as on the command line; its return type is a pydantic
model (clients get an outputSchema and structured content); a bad argument becomes a readable tool
error with nothing spent. Tools that rent GPUs or stop things need `confirm=true`; without it they
answer with what they would do and what it would cost. tools/mcp_server.py imports this module only
when a client calls a tool (or lists tools with no cached listing), so start-up stays fast.

One module per capability family holds its tools (tools/mcp_<family>.py, each with `register`); what they
share (annotations, flat arguments, refusals, progress) is tools/mcp_common.py. The domain logic is in the
capabilities they call (tools/plan_frontier.py, tools/bench_request.py, tools/result_compare.py, ...).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mcp.server import MCPServer

if TYPE_CHECKING:
    from worldtune.tools.mcp_session import Session


def register_tools(mcp: MCPServer, session: Session) -> None:
    """Add every worldtune tool to `mcp`; they share `session` (the results database)."""
    from worldtune.tools import (
        mcp_bench,
        mcp_capacity,
        mcp_deploy,
        mcp_heartbeat,
        mcp_offers,
        mcp_plans,
        mcp_replan,
        mcp_report,
        mcp_results,
        mcp_runs,
        mcp_tuning,
    )

    mcp_offers.register(mcp, session)
    mcp_plans.register(mcp, session)
    mcp_deploy.register(mcp, session)
    mcp_bench.register(mcp, session)
    mcp_results.register(mcp, session)
    mcp_tuning.register(mcp, session)
    mcp_capacity.register(mcp, session)  # plan_capacity: fleets for traffic (tools/capacity.py)
    mcp_replan.register(mcp, session)  # replan_deployment: keep the node, change the plan (tools/replan.py)
    mcp_runs.register(mcp, session)  # record_run, mark_run: a tuning run's record (tools/run_records.py)
    mcp_heartbeat.register(mcp, session)  # heartbeat_run: a run belongs to its client (tools/run_heartbeat.py)
    mcp_report.register(mcp, session)  # write_report: the report file, drawn on the server by its Tuner
