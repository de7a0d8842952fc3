"""What the MCP tools share in one server: the results database, the tuner (if any) and who the clients are.

Every tool family (tools/mcp/*.py) gets it from its call's Context (`session_of`); the server (tools/mcp/server.py)
makes one per server.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError

if TYPE_CHECKING:
    from worldtune.tools.store.database import Store
    from worldtune.tools.words.deployment import Deployment
    from worldtune.tools.words.tuning import Tuner


class Session:
    """What the tools share: the results database (opened on first use, so tools/list never waits on it)."""

    def __init__(self, db_path: str | None = None, tuner: Tuner | None = None, origin: str = "mcp-local") -> None:
        self.db_path = db_path
        self.tuner = tuner
        self.origin = origin  # who the clients are, for the profile-path allow-list (tools/plans/profile_paths.py)
        self._store: Store | None = None

    @property
    def store(self) -> Store:
        if self._store is None:
            from worldtune.tools.store.database import Store

            self._store = Store(self.db_path)
        return self._store

    def deployment(self, deployment_id: str) -> Deployment:
        found = self.store.get_deployment(deployment_id)
        if found is None:
            known = [d.id for d in self.store.list_deployments()][-10:]
            hint = f"known: {', '.join(known)}" if known else "no deployments yet: call deploy first"
            raise ToolError(f"deployment_id={deployment_id!r} is not valid: no such deployment ({hint})")
        return found

    def benchmark_row(self, benchmark_id: str) -> dict[str, Any]:
        row = self.store.get_benchmark(benchmark_id)
        if row is None:
            known = [r["id"] for r in self.store.list_benchmarks(limit=10)]
            hint = f"recent: {', '.join(known)}" if known else "no benchmarks yet: call start_benchmark first"
            raise ToolError(f"benchmark_id={benchmark_id!r} is not valid: no such benchmark ({hint})")
        return row


def session_of(ctx: Context) -> Session:
    """The Session of the server this tool call came to (build_server gives each server its own)."""
    found = getattr(ctx.mcp_server, "worldtune_session", None)
    if not isinstance(found, Session):
        raise ToolError("this tool runs only on a worldtune server (tools/mcp/server.py build_server)")
    return found
