"""The MCP tool heartbeat_run: a client says it is still there for a run it started (tools/runs/run_heartbeat.py).

The first call from a session binds the run to it (with its grace, or detached with hold_hours); every later
call, and every tool call carrying the run's id from that session (tools/mcp/client_hooks.py), is a heartbeat.
start_tuning binds the runs it starts the same way (`bind_here`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from mcp.server.mcpserver import Context
from pydantic import BaseModel, Field

from worldtune.tools.mcp.common import RECORDS, refusals, tool
from worldtune.tools.mcp.session import session_of

if TYPE_CHECKING:
    from worldtune.tools.mcp.session import Session

GraceArg = Annotated[
    float | None,
    Field(
        gt=0,
        le=86400,
        allow_inf_nan=False,
        description="seconds without a heartbeat after which the server abandons the run (tears down what it "
        "started); default: the server's (120 s unless --run-grace-s)",
    ),
]
HoldHoursArg = Annotated[
    float | None,
    Field(
        gt=0,
        le=720,
        allow_inf_nan=False,
        description="detach only: hours a detached run may go on without a heartbeat before it is abandoned",
    ),
]


class RunClient(BaseModel):
    """A run's client binding as the server keeps it."""

    run_id: str
    session: str = Field(description="the MCP session the run is bound to")
    grace_s: float | None = Field(description="seconds without a heartbeat before it is abandoned (None: never)")
    detach: bool
    hold_hours: float | None = None
    heartbeat_at: float
    abandoned: str | None = Field(default=None, description="why the server abandoned the run, once it has")


def bind_here(
    session: Session, ctx: Context, run_id: str, grace_s: float | None, detach: bool, hold_hours: float | None
) -> RunClient:
    """Bind `run_id` to the MCP session of this call (its end then abandons the run unless detached)."""
    from worldtune.tools.mcp.client_hooks import connection_of, hook_session_end, session_key
    from worldtune.tools.runs import run_heartbeat

    connection = connection_of(ctx.request_context.session)
    with refusals():
        row = run_heartbeat.bind(session.store, run_id, session_key(connection), grace_s, detach, hold_hours)
    if not detach:
        hook_session_end(connection, session)
    return _client(row)


def _client(row: dict[str, object]) -> RunClient:
    return RunClient.model_validate(
        {**row, "detach": bool(row["detach"]), "abandoned": row["reason"] if row.get("abandoned_at") else None}
    )


@tool("Heartbeat a run", RECORDS)
def heartbeat_run(
    ctx: Context,
    run_id: Annotated[str, Field(min_length=1, max_length=100, description="the run's id")],
    grace_s: GraceArg = None,
    detach: Annotated[
        bool | None, Field(description="let the run outlive this session (unset: as bound before, else false)")
    ] = None,
    hold_hours: HoldHoursArg = None,
) -> RunClient:
    """Tell the server this client is still there for a run: the first call binds the run to this MCP session,
    later ones keep it alive (and a call from another session moves it there). Without heartbeats for its grace,
    or when this session ends, the server stops the run, tears down what it started and marks it abandoned
    (samples kept), unless it is detached. Any tool call carrying the run's id from this session counts too."""
    from worldtune.tools.mcp.client_hooks import connection_of, session_key
    from worldtune.tools.runs import run_heartbeat

    session = session_of(ctx)
    row = run_heartbeat.get(session.store, run_id) or {}
    here = session_key(connection_of(ctx.request_context.session))
    keep = bool(row.get("detach")) if detach is None else detach  # unset: the terms it was bound with
    hours = (hold_hours if hold_hours is not None else row.get("hold_hours")) if keep else None
    grace = None if keep else (grace_s if grace_s is not None else row.get("grace_s"))
    bound = (bool(row.get("detach")), row.get("hold_hours"), None if row.get("detach") else row.get("grace_s"))
    if row and row["session"] == here and (keep, hours, grace) == bound:
        return _client(row)  # bound here already on these terms: the middleware has just stamped its heartbeat
    return bind_here(session, ctx, run_id, grace, keep, hours)
