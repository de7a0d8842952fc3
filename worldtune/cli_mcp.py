"""`worldtune mcp`: serve the MCP tools over stdio (for IDE assistants) or streamable HTTP (for remote clients).

HTTP binds to 127.0.0.1 by default. Binding to any other address needs a bearer token (--token or
$WORLDTUNE_MCP_TOKEN); with a token, every request without `Authorization: Bearer <token>` gets 401.
Nothing is printed on stdout in stdio mode: stdout is the protocol.

Tuning runs started over MCP end with the session: when the stdio client disconnects (stdin closes),
or the server gets SIGTERM, SIGHUP or Ctrl-C, it stops every run it drives, waits for their teardown,
then exits. A run started with detach=true is a process of its own and goes on. On both transports a run
also ends when its client's heartbeat stops for longer than its grace (tools/runs/run_heartbeat.py).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

if TYPE_CHECKING:
    from mcp.server.transport_security import TransportSecuritySettings

TOKEN_ENV = "WORLDTUNE_MCP_TOKEN"
LOOPBACK_HOSTS = ["127.0.0.1:*", "localhost:*", "[::1]:*"]
LOOPBACK_ORIGINS = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]


def is_loopback(host: str) -> bool:
    """Whether a bind address only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def transport_security(
    host: str, allowed_hosts: list[str], allowed_origins: list[str]
) -> TransportSecuritySettings | None:
    """Host/Origin checks (DNS-rebinding protection): loopback names always, plus the ones given.

    On a wildcard bind (0.0.0.0, ::) without --allowed-hosts the Host check is off, since the names
    clients will use are unknown; the bearer token is what protects such a server.
    """
    from mcp.server.transport_security import TransportSecuritySettings

    if not is_loopback(host) and not allowed_hosts:
        if host in ("0.0.0.0", "::", "[::]"):
            return TransportSecuritySettings(enable_dns_rebinding_protection=False)
        allowed_hosts = [f"{host}:*"]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=LOOPBACK_HOSTS + list(allowed_hosts),
        allowed_origins=LOOPBACK_ORIGINS + list(allowed_origins),
    )


def serve(
    transport: Literal["stdio", "http"] = "stdio",
    host: str = "127.0.0.1",
    port: int = 8765,
    token: str | None = None,
    allowed_hosts: list[str] | None = None,
    allowed_origins: list[str] | None = None,
    db: str | None = None,
    run_grace_s: float | None = None,
) -> None:
    """Run the MCP server until the client disconnects (stdio) or the process is stopped (HTTP)."""
    from worldtune.tools.words.errors import InvalidInput

    if transport == "http" and not is_loopback(host) and not token:
        raise InvalidInput(
            "host",
            host,
            "a loopback address (127.0.0.1, ::1, localhost) unless a bearer token is set",
            f"pass --token TOKEN or set ${TOKEN_ENV} to serve on {host}",
        )
    if not 1 <= port <= 65535:
        raise InvalidInput("port", port, "1 to 65535")
    from worldtune.agent.tuner import AgentTuner
    from worldtune.tools.mcp.server import build_server
    from worldtune.tools.runs import run_heartbeat
    from worldtune.tools.runs.lease import Sweeper

    if run_grace_s is not None:  # the server's default grace for the runs its clients start
        os.environ[run_heartbeat.GRACE_ENV] = str(run_heartbeat.check_grace(run_grace_s))
    run_heartbeat.default_grace_s()  # a bad $WORLDTUNE_RUN_GRACE_S is refused before the server starts
    tuner = AgentTuner()
    sweeper = Sweeper(db)  # the hours a deploy asked for run out here too, not only at the next `worldtune gc`
    runs = run_heartbeat.RunSweeper(db, tuner.stop_run)  # a run whose client is gone is abandoned (torn down)
    if transport == "stdio":
        with sweeper, runs, _session(tuner, db):
            build_server(db, cache_tools=True, tuner=tuner).run()
        return
    import anyio
    import uvicorn

    run_heartbeat.hold_starts()  # an HTTP client is there only while it beats: a silent one's run starts nothing
    server = build_server(
        db,
        bearer_token=token,
        url=f"http://{host_for_url(host)}:{port}",
        cache_tools=True,
        tuner=tuner,
        origin="mcp-http",
    )
    app = server.streamable_http_app(
        transport_security=transport_security(host, allowed_hosts or [], allowed_origins or []), host=host
    )
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    logging.getLogger("worldtune.mcp").warning("worldtune MCP on http://%s:%d/mcp", host_for_url(host), port)
    try:
        with sweeper, runs:
            anyio.run(uvicorn.Server(config).serve)
    finally:  # HTTP has no session of its own: the server stopping ends every run it drives
        tuner.session_ended()


@contextmanager
def _session(tuner: Any, db: str | None = None) -> Iterator[None]:
    """The stdio session: its end (stdin closed, or a signal) abandons the runs its client started (torn down,
    marked `abandoned` with the reason, as when an HTTP client's session ends), then stops any other it drives."""

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)
    try:
        yield
    except KeyboardInterrupt:
        pass  # a signal ends the session like a closed stdin
    finally:
        from worldtune.tools.runs import run_heartbeat
        from worldtune.tools.store.database import Store

        try:  # stdio has one client, bound as "client": its runs are due now
            store = Store(db)
            run_heartbeat.session_ended(store, "client")
            run_heartbeat.sweep(store, tuner.stop_run)
        except Exception as exc:  # a locked database: the runs are still stopped below, gc tears down the rest
            logging.getLogger("worldtune.runs").warning("abandoning the session's runs failed: %s", exc)
        tuner.session_ended()


def host_for_url(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def register(app: typer.Typer) -> None:
    """Add `worldtune mcp` to the command line."""

    @app.command()
    def mcp(
        transport: Annotated[str, typer.Option(help="stdio (for IDE assistants) | http (streamable HTTP)")] = "stdio",
        host: Annotated[str, typer.Option(help="HTTP bind address; non-loopback needs a token")] = "127.0.0.1",
        port: Annotated[int, typer.Option(help="HTTP port")] = 8765,
        token: Annotated[
            str | None, typer.Option(help=f"bearer token every HTTP request must carry (or ${TOKEN_ENV})")
        ] = None,
        allowed_hosts: Annotated[
            list[str] | None, typer.Option("--allowed-hosts", help="extra Host headers accepted, e.g. myhost:8765")
        ] = None,
        allowed_origins: Annotated[
            list[str] | None, typer.Option("--allowed-origins", help="extra Origin headers accepted")
        ] = None,
        db: Annotated[
            str | None, typer.Option(help="results database (default $WORLDTUNE_DB or ~/.local/share)")
        ] = None,
        run_grace_s: Annotated[
            float | None,
            typer.Option(
                help="seconds a run may go without its client's heartbeat before it is abandoned and torn "
                "down (default $WORLDTUNE_RUN_GRACE_S or 120; per run: grace_s)"
            ),
        ] = None,
    ) -> None:
        """Serve worldtune's tools to MCP clients: IDE assistants (stdio) or remote clients (HTTP)."""
        from worldtune.cli import fail
        from worldtune.tools.words.errors import WorldtuneError

        if transport not in ("stdio", "http"):
            raise fail(f"transport={transport!r} is not valid: expected one of stdio, http")
        from worldtune.tools.store.db_path import resolve_db_path

        try:
            resolve_db_path(db)  # refused before the server starts, not at the first tool call
            serve(
                "stdio" if transport == "stdio" else "http",
                host=host,
                port=port,
                token=token or os.environ.get(TOKEN_ENV) or None,
                allowed_hosts=allowed_hosts,
                allowed_origins=allowed_origins,
                db=db,
                run_grace_s=run_grace_s,
            )
        except WorldtuneError as exc:
            raise fail(exc) from exc
        except KeyboardInterrupt:
            sys.exit(0)
