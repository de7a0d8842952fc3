"""The MCP tools: thin, typed wrappers over worldtune's plain functions, registered on the server.

Every tool's parameters are flat and named as on the command line; its return type is a pydantic
model (clients get an outputSchema and structured content); a bad argument becomes a readable tool
error with nothing spent. Tools that rent GPUs or stop things need `confirm=true`; without it they
answer with what they would do and what it would cost. tools/mcp/server.py imports this module only
when a client calls a tool (or lists tools with no cached listing), so start-up stays fast.

One module per capability family holds its tools (tools/mcp/<family>.py, each with `register`); what they
share (annotations, flat arguments, refusals, progress) is tools/mcp/common.py. The domain logic is in the
capabilities they call (tools/plans/frontier.py, tools/bench/request.py, tools/results/compare.py, ...).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mcp.server import MCPServer

if TYPE_CHECKING:
    from worldtune.tools.mcp.session import Session


def register_tools(mcp: MCPServer, session: Session) -> None:
    """Add every worldtune tool to `mcp`; they share `session` (the results database)."""
    from worldtune.tools.mcp import bench as mcp_bench
    from worldtune.tools.mcp import capacity as mcp_capacity
    from worldtune.tools.mcp import deploy as mcp_deploy
    from worldtune.tools.mcp import heartbeat as mcp_heartbeat
    from worldtune.tools.mcp import offers as mcp_offers
    from worldtune.tools.mcp import plans as mcp_plans
    from worldtune.tools.mcp import replan as mcp_replan
    from worldtune.tools.mcp import report as mcp_report
    from worldtune.tools.mcp import results as mcp_results
    from worldtune.tools.mcp import runs as mcp_runs
    from worldtune.tools.mcp import tuning as mcp_tuning

    mcp_offers.register(mcp, session)
    mcp_plans.register(mcp, session)
    mcp_deploy.register(mcp, session)
    mcp_bench.register(mcp, session)
    mcp_results.register(mcp, session)
    mcp_tuning.register(mcp, session)
    mcp_capacity.register(mcp, session)  # plan_capacity: fleets for traffic (tools/deployments/capacity.py)
    mcp_replan.register(mcp, session)  # replan_deployment: keep the node, change the plan (tools/deployments/replan.py)
    mcp_runs.register(mcp, session)  # record_run, mark_run: a tuning run's record (tools/results/run_records.py)
    mcp_heartbeat.register(mcp, session)  # heartbeat_run: a run belongs to its client (tools/results/run_heartbeat.py)
    mcp_report.register(mcp, session)  # write_report: the report file, drawn on the server by its Tuner
