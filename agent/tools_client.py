"""The agent's hands: every action on the world is a call to a worldtune MCP tool.

By default the client talks to an in-process server over the same results database (`mcp.Client(server)`);
with a URL it talks to a remote `worldtune mcp --transport http` server. Either way an IDE user can do
by hand exactly what the agent does, with the same tool names and arguments.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

from worldtune.tools.words.errors import WorldtuneError


class ToolCallFailed(WorldtuneError):
    """An MCP tool answered with an error; carries the tool's name and its message."""

    def __init__(self, tool: str, message: str) -> None:
        self.tool = tool
        super().__init__(f"{tool}: {message}")


TOKEN_ENV = "WORLDTUNE_MCP_TOKEN"  # the bearer token a remote server demands (the server reads the same variable)


class RemoteRefused(WorldtuneError):
    """A remote MCP server could not be reached, or refused this client's token; says which and what to do."""


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc, *(_leaves(exc.__cause__) if exc.__cause__ else [])]


@contextlib.asynccontextmanager
async def open_client(target: Any) -> AsyncIterator[Any]:
    """An MCP client session on an in-process server, or on a URL carrying the bearer token of $WORLDTUNE_MCP_TOKEN.

    A server that answers 401 (no token, a wrong one) or nothing at all is reported in one line that says what
    to set, not as the SDK's task-group traceback.
    """
    from mcp import Client

    if not isinstance(target, str):
        async with Client(target) as client:
            yield client
        return
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    token = os.environ.get(TOKEN_ENV) or None
    statuses: list[int] = []

    async def note(response: httpx2.Response) -> None:
        statuses.append(response.status_code)

    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"} if token else {},
        timeout=httpx2.Timeout(30.0, read=300.0),  # the SDK's own defaults: a response stream may stay open
        event_hooks={"response": [note]},
    )
    try:
        async with http, Client(streamable_http_client(target, http_client=http)) as client:
            yield client
    except Exception as exc:
        if 401 in statuses or 403 in statuses:
            said = "refused the token (--mcp-token or $" + TOKEN_ENV + ")" if token else "needs a bearer token"
            raise RemoteRefused(
                f"mcp_url={target!r}: the server {said} (HTTP {401 if 401 in statuses else 403}); set ${TOKEN_ENV} "
                "(or tune --mcp-token) to the token the server was started with"
            ) from None
        if any(isinstance(leaf, httpx2.ConnectError | httpx2.ConnectTimeout) for leaf in _leaves(exc)):
            raise RemoteRefused(
                f"mcp_url={target!r}: no MCP server answers there (start one with "
                "`worldtune mcp --transport http`, or check the host and port)"
            ) from None
        raise


class ToolsClient:
    """A connected MCP client session with a typed `call` that returns the tool's structured content."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.calls: list[str] = []

    async def call(self, tool: str, /, **arguments: Any) -> dict[str, Any]:
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

    async def call(self, tool: str, /, **arguments: Any) -> dict[str, Any]:
        """Call one tool in a session of its own; raise ToolCallFailed as ToolsClient does."""
        self.calls.append(tool)
        async with open_client(self._target()) as client:
            return await ToolsClient(client).call(tool, **arguments)
