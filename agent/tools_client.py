"""The agent's hands: every action on the world is a call to a worldtune MCP tool.

By default the client talks to an in-process server over the same results database (`mcp.Client(server)`);
with a URL it talks to a remote `worldtune mcp --transport http` server. Either way an IDE user can do
by hand exactly what the agent does, with the same tool names and arguments.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from worldtune.tools.words.errors import WorldtuneError


class ToolCallFailed(WorldtuneError):
    """An MCP tool answered with an error; carries the tool's name and its message."""

    def __init__(self, tool: str, message: str) -> None:
        self.tool = tool
        super().__init__(f"{tool}: {message}")


class ToolsClient:
    """A connected MCP client session with a typed `call` that returns the tool's structured content."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.calls: list[str] = []

    async def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        """Call one tool; raise ToolCallFailed with its message when it refuses or fails."""
        self.calls.append(tool)
        args = {k: v for k, v in arguments.items() if v is not None}
        result = await self._client.call_tool(tool, args)
        if getattr(result, "is_error", False) or getattr(result, "isError", False):
            texts = [getattr(c, "text", "") for c in getattr(result, "content", [])]
            raise ToolCallFailed(tool, " ".join(t for t in texts if t) or "failed")
        content = getattr(result, "structured_content", None)
        if content is None:
            content = getattr(result, "structuredContent", None)
        if isinstance(content, dict):
            inner = content.get("result")
            return inner if set(content) == {"result"} and isinstance(inner, dict) else content
        return {"result": content}


@contextlib.asynccontextmanager
async def connect(db_path: str | None = None, mcp_url: str | None = None) -> AsyncIterator[ToolsClient]:
    """A session with the worldtune MCP tools: in-process over `db_path`, or the server at `mcp_url`."""
    from mcp import Client

    if mcp_url:
        target: Any = mcp_url
    else:
        from worldtune.tools.mcp.server import build_server

        # origin "cli": the run's twin profile was checked against its caller's allow-list when the run started.
        # No tuner: a run's own tools never start, resume or stop runs (their tools answer that they are not
        # available here), so the tools client does not import the runner that drives it.
        target = build_server(db_path, origin="cli")
    async with Client(target) as client:
        yield ToolsClient(client)


class SessionPerCall:
    """The tools of a run that was handed no client (LangGraph Studio, `langgraph dev`): one MCP session per call.

    The runner opens one session for a whole run; a graph started by the LangGraph server gets no such
    scope, and a session held open across nodes would be entered and left in different tasks. In-process
    sessions cost little, and the server object (and its database) is kept between calls.
    """

    def __init__(self, db_path: str | None = None, mcp_url: str | None = None) -> None:
        self.db_path = db_path
        self.mcp_url = mcp_url
        self.calls: list[str] = []
        self._server: Any = None

    def _target(self) -> Any:
        if self.mcp_url:
            return self.mcp_url
        if self._server is None:
            from worldtune.tools.mcp.server import build_server

            self._server = build_server(self.db_path)  # no tuner, as in connect()
        return self._server

    async def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        """Call one tool in a session of its own; raise ToolCallFailed as ToolsClient does."""
        from mcp import Client

        self.calls.append(tool)
        async with Client(self._target()) as client:
            return await ToolsClient(client).call(tool, **arguments)
