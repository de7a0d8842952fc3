"""The MCP side of "a run belongs to its client": every tool call carrying a run id, and the session's end.

A middleware on the server (the SDK's `MCPServer.middleware`, registered by tools/mcp/server.py) sees every
`tools/call` before it runs. One that carries `run_id` stamps the run's heartbeat when it comes from the
session the run is bound to (tools/runs/run_heartbeat.py), and keeps stamping while the call lasts (get_tuning may
wait 600 s); one that would start something for an abandoned run is refused with the reason. The session's
end is the SDK's per-connection teardown (`Connection.exit_stack`, unwound when a stdio client closes stdin or
an HTTP session is deleted, times out or breaks): binding a run pushes a callback there that marks the
session's runs due, and the sweep abandons them at once.

Imports stay light: this module is loaded when the server is built, before any tool.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
from mcp_types import CallToolResult

if TYPE_CHECKING:
    from mcp.server.context import CallNext, HandlerResult, ServerRequestContext

    from worldtune.tools.mcp.session import Session

# Tools that would start, measure or record something for the run: refused once it is abandoned.
STARTS_FOR_RUN = frozenset(
    {
        "deploy",
        "provision",
        "start_benchmark",
        "replan_deployment",
        "record_run",
        "mark_run",
        "rehearse_fleet",
        "record_fleet",
        "heartbeat_run",
    }
)
# Of those, the ones that start something new (a node, a lane, a benchmark): held while the run's client has
# missed its heartbeat, so a run whose client died buys nothing while it waits out its grace (issue 36).
STARTS_NEW = frozenset({"deploy", "provision", "start_benchmark", "replan_deployment", "rehearse_fleet"})
HELD_POLL_S = 0.5
HOOKED = "worldtune_run_clients_hook"  # the Connection.state key: its end callback is pushed once


def connection_of(server_session: Any) -> Any:
    """The SDK Connection behind a request's ServerSession. mcp 2.3 hands tools and middleware a per-request
    ServerSession whose Connection (with `state` and `exit_stack`, the per-connection teardown) has no public
    accessor yet (the SDK's Context rework, its TODO L54, adds `ctx.connection`); None if it is not there."""
    return getattr(server_session, "connection", None) or getattr(server_session, "_connection", None)


def session_key(connection: Any) -> str:
    """The name a client session is bound under: the HTTP session id of a stateful (handshake-era) session; else
    "client". The 2026-07-28 protocol has no session (each request is a connection of its own) and a stdio
    server has one client: there the heartbeat, not the connection, says whether the client is there."""
    return str(getattr(connection, "session_id", None) or "client")


def hook_session_end(connection: Any, session: Session) -> None:
    """Make the end of a stateful HTTP session (DELETE, idle timeout, crash) mark its runs due, once per session.
    Stdio's end is the server's own (worldtune/cli_mcp.py stops its runs); a request-scoped connection's end
    says nothing about the client."""
    if connection is None or not getattr(connection, "session_id", None) or connection.state.get(HOOKED):
        return
    connection.state[HOOKED] = True
    key = session_key(connection)

    async def ended() -> None:
        from worldtune.tools.runs import run_heartbeat

        await anyio.to_thread.run_sync(lambda: run_heartbeat.session_ended(session.store, key))

    connection.exit_stack.push_async_callback(ended)


def _refusal(text: str) -> CallToolResult:
    from mcp_types import TextContent

    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


async def _wait_while_missing(store: Any, run_id: str) -> str | None:
    """Wait while the run's client has missed its heartbeat; the abandonment's reason if the run is abandoned
    meanwhile (the sweep decides that at the grace), else None once the client is back."""
    from worldtune.tools.runs import run_heartbeat

    said = False
    while True:
        missing, abandoned = await anyio.to_thread.run_sync(
            lambda: (run_heartbeat.missed_heartbeat(store, run_id), run_heartbeat.abandoned_reason(store, run_id))
        )
        if abandoned is not None:
            return abandoned
        if missing is None:
            return None
        if not said:
            run_heartbeat.log.warning(
                "run %s: %s; nothing new starts until it is back or the run is abandoned", run_id, missing
            )
            said = True
        await anyio.sleep(HELD_POLL_S)


class RunClients:
    """The middleware: heartbeats from the bound session, refusals for abandoned runs."""

    def __init__(self, session: Session, beat_every_s: float = 1.0, beats: bool = True) -> None:
        self.session = session
        self.beat_every_s = beat_every_s
        self.beats = beats  # False on a run's own in-process tools: they never keep the run alive

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        params = ctx.params or {}
        arguments = params.get("arguments") if ctx.method == "tools/call" else None
        run_id = arguments.get("run_id") if isinstance(arguments, dict) else None
        if not isinstance(run_id, str) or not run_id:
            return await call_next(ctx)
        from worldtune.tools.runs import run_heartbeat

        store = self.session.store
        reason = await anyio.to_thread.run_sync(lambda: run_heartbeat.abandoned_reason(store, run_id))
        name = params.get("name")
        if not self.beats and reason is None and name in STARTS_NEW and run_heartbeat.HOLD["starts"]:
            # a run's own tools: hold a start while its client is missing, until it is back or the run abandoned
            reason = await _wait_while_missing(store, run_id)
        if reason is not None and name in STARTS_FOR_RUN:
            return _refusal(
                f"Error executing tool {name}: run_id={run_id!r} is not valid: the run was abandoned "
                f"({reason}); nothing more is started for it"
            )
        if not self.beats:
            return await call_next(ctx)
        key = session_key(connection_of(ctx.session))

        def beat() -> None:
            run_heartbeat.beat_from(store, run_id, key)

        await anyio.to_thread.run_sync(beat)
        done = anyio.Event()

        async def keep_beating() -> None:  # a call that waits (get_tuning wait_s) is a client that is there
            while not done.is_set():
                with anyio.move_on_after(self.beat_every_s):
                    await done.wait()
                if not done.is_set():
                    await anyio.to_thread.run_sync(beat)

        result: HandlerResult = None
        error: BaseException | None = None
        async with anyio.create_task_group() as group:
            group.start_soon(keep_beating)
            try:
                result = await call_next(ctx)
            except BaseException as exc:  # raised below, outside the group, so it is not wrapped in a group
                error = exc
            finally:
                done.set()
        if error is not None:
            raise error
        return result
