"""The MCP tool server: worldtune's capabilities for IDE assistants, scripts and the agent.

The tools themselves live in their families, tools/mcp/*.py, wired by tools/mcp/registry.py. An IDE starts this
server often and waits for its tool list, so those modules (and the deployment, benchmark and model code
they import) are loaded only when a tool is called: `tools/list` is answered from a cached listing, keyed
by the source of tools/ and the SDK and pydantic installs, whenever one matches; otherwise the tools are
registered and the cache is written. Resources and prompts are registered at once (they are cheap).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcp.server import MCPServer
from mcp.server.auth.provider import AccessToken
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, InputRequiredResult
from mcp_types import Tool as MCPTool
from pydantic import ValidationError

from worldtune import __version__
from worldtune.tools.mcp.session import Session

if TYPE_CHECKING:
    from mcp.server.mcpserver import Context

    from worldtune.tools.words.tuning import Tuner

log = logging.getLogger("worldtune.mcp")

SERVER_NAME = "worldtune"
INSTRUCTIONS = (
    "worldtune finds the cheapest way to serve NVIDIA Cosmos 3 world models on vLLM-Omni that meets a latency "
    "or throughput goal. Start with list_plans or estimate (free, offline predictions), deploy a plan on the "
    "twin engine (infra local, engine twin: free, no confirmation) and benchmark it with start_benchmark / "
    "get_benchmark. Anything that rents GPUs or stops a deployment needs confirm=true; call it once without "
    "to see what it would do and cost."
)
TOOLS_DIR = Path(__file__).resolve().parents[1]  # tools/: every room, the words included


class StaticTokenVerifier:
    """Accepts exactly one bearer token, compared in constant time."""

    def __init__(self, token: str) -> None:
        self._token = token.encode()

    async def verify_token(self, token: str) -> AccessToken | None:
        if hmac.compare_digest(token.encode(), self._token):
            return AccessToken(token=token, client_id="worldtune-mcp", scopes=[])
        return None


class NoTokenChallenge:
    """ASGI wrapper: a 401 to a request that sent no credentials carries no `error=` in its challenge.

    RFC 6750 section 3.1: when a request lacks authentication information the server should not include an
    error code; the SDK's middleware says `error="invalid_token"` either way. A wrong token keeps it.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        sent_credentials = scope.get("type") != "http" or any(
            name.lower() == b"authorization" for name, _ in scope.get("headers", [])
        )
        if sent_credentials:
            await self.app(scope, receive, send)
            return

        async def send_challenge(message: Any) -> None:
            if message.get("type") == "http.response.start" and message.get("status") == 401:
                headers = [
                    (k, _bare_challenge(v) if k.lower() == b"www-authenticate" else v)
                    for k, v in message.get("headers", [])
                ]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_challenge)


def _bare_challenge(value: bytes) -> bytes:
    """`Bearer error=..., error_description=..., resource_metadata="U"` -> `Bearer resource_metadata="U"`."""
    parts = [p.strip() for p in value.decode().removeprefix("Bearer").split(",")]
    kept = [p for p in parts if p and not p.startswith(("error=", "error_description="))]
    return ("Bearer " + ", ".join(kept)).strip().encode()


# ---- the cached tool listing ----------------------------------------------------------------------
def tools_cache_dir() -> Path:
    """$XDG_CACHE_HOME/worldtune (~/.cache/worldtune by default)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "worldtune"


def tools_cache_key() -> str:
    """Changes whenever anything that shapes the tool schemas may have changed."""
    import mcp
    import pydantic

    digest = hashlib.sha256(__version__.encode())
    for path in sorted(TOOLS_DIR.rglob("*.py")):
        digest.update(path.relative_to(TOOLS_DIR).as_posix().encode() + b"\0" + path.read_bytes())
    for package in (mcp, pydantic):
        stat = Path(package.__file__ or "").stat()
        digest.update(f"{package.__name__}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:24]


def argument_refusal(tool: str, exc: ValidationError, fields: list[str]) -> CallToolResult:
    """A tool call whose arguments do not validate, as one line per problem naming the field, the value and what
    is valid (tools/words/errors.describe), with the tool's fields when one is unknown."""
    from mcp_types import TextContent

    from worldtune.tools.words.errors import describe

    text = describe(exc).replace(f"is not a known field of {exc.title}", f"is not a field of {tool}")
    if any(e.get("type") == "extra_forbidden" for e in exc.errors()):
        text += f" (its fields: {', '.join(fields)})"
    return CallToolResult(
        content=[TextContent(type="text", text=f"Error executing tool {tool}: {text}")], is_error=True
    )


class WorldtuneServer(MCPServer):
    """An MCPServer whose tools are registered on first use, with `tools/list` served from a cache."""

    def __init__(
        self, register_tools: Callable[[MCPServer], None], cache: Path | None, session: Session, **settings: Any
    ) -> None:
        super().__init__(**settings)
        self.worldtune_session = session  # what every tool call reads through its Context (session.session_of)
        self._register_tools = register_tools
        self._tools_registered = False
        self._tools_cache = cache

    @property
    def tools_registered(self) -> bool:
        return self._tools_registered

    def ensure_tools(self) -> None:
        """Import and register the tools (once)."""
        if not self._tools_registered:
            self._register_tools(self)
            self._tools_registered = True

    def _cached_tools(self) -> list[MCPTool] | None:
        if self._tools_cache is None or not self._tools_cache.is_file():
            return None
        try:
            return [MCPTool.model_validate(t) for t in json.loads(self._tools_cache.read_text())]
        except (OSError, ValueError, ValidationError):
            return None  # unreadable or from another SDK: rebuild

    def _save_tools(self, tools: list[MCPTool]) -> None:
        if self._tools_cache is None:
            return
        data = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]
        try:
            self._tools_cache.parent.mkdir(parents=True, exist_ok=True)
            partial = self._tools_cache.with_suffix(f".{os.getpid()}.tmp")
            partial.write_text(json.dumps(data))
            partial.replace(self._tools_cache)
            for stale in self._tools_cache.parent.glob("mcp-tools-*.json"):  # listings of older code
                if stale != self._tools_cache:
                    stale.unlink(missing_ok=True)
        except OSError as exc:  # a read-only home only costs speed
            log.info("tool listing not cached: %s", exc)

    async def list_tools(self) -> list[MCPTool]:
        if not self._tools_registered and (cached := self._cached_tools()) is not None:
            return cached
        self.ensure_tools()
        tools = await super().list_tools()
        self._save_tools(tools)
        return tools

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        self.ensure_tools()
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:  # the SDK's refusal of the arguments (tools/mcp/registry.py's strict model): one line
            tool = self._tool_manager.get_tool(name)  # mcp==2.3.0 (pinned)
            cause = exc.__cause__
            if tool is None or not isinstance(cause, ValidationError):
                raise
            if cause.title != tool.fn_metadata.arg_model.__name__:  # a validation error of the tool's own work
                raise
            return argument_refusal(name, cause, list(tool.parameters.get("properties") or {}))

    def _tool_input_schema(self, name: str) -> dict[str, Any] | None:
        self.ensure_tools()
        return super()._tool_input_schema(name)

    def streamable_http_app(self, **kwargs: Any) -> Any:
        """The SDK's Starlette app, with RFC 6750's bare challenge when no token was sent."""
        app = super().streamable_http_app(**kwargs)
        if self._token_verifier is not None:
            app.add_middleware(NoTokenChallenge)
        return app


# ---- the server -----------------------------------------------------------------------------------
def build_server(
    db_path: str | None = None,
    *,
    bearer_token: str | None = None,
    url: str = "http://127.0.0.1:8765",
    cache_tools: bool = False,
    tuner: Tuner | None = None,
    origin: str = "mcp-local",
) -> MCPServer:
    """The worldtune MCP server over the results database at `db_path` ($WORLDTUNE_DB or the default).

    bearer_token: over HTTP, every request must carry `Authorization: Bearer <token>` (else 401);
    `url` is where the server is reached (the token's issuer). Stdio ignores both.
    cache_tools: answer `tools/list` from the cached listing when it matches this code (what
    `worldtune mcp` does, since an IDE waits on it; in-process users need no cache).
    tuner: what start_tuning, get_tuning and approve_tuning run on (the agent's AgentTuner); without
    one those tools answer that tuning is not available here (tools never import the agent).
    origin: "mcp-local" (stdio: a client on this machine), "mcp-http" (remote clients: profiles by name
    only), or "cli" (the agent's in-process server, whose caller already checked its paths).
    """
    if origin not in ("cli", "mcp-local", "mcp-http"):  # profile_paths.ORIGINS, without its import at start-up
        from worldtune.tools.words.errors import InvalidInput

        raise InvalidInput("origin", origin, "one of cli, mcp-local, mcp-http")
    session = Session(db_path, tuner, origin)
    auth: dict[str, Any] = {}
    if bearer_token:
        from mcp.server.auth.settings import AuthSettings

        # The token is shared out of band (no OAuth flow), yet clients discover how to authenticate from the
        # protected-resource metadata (RFC 9728) the MCP authorization spec asks for: the SDK serves it at
        # /.well-known/oauth-protected-resource/mcp and names it in every 401; the root form is added below.
        # validate_token_resource is off: a static token has no audience to compare with the resource.
        auth = {
            "token_verifier": StaticTokenVerifier(bearer_token),
            "auth": AuthSettings(
                issuer_url=url, resource_server_url=f"{url.rstrip('/')}/mcp", validate_token_resource=False
            ),
        }

    def register(server: MCPServer) -> None:
        from worldtune.tools.mcp.registry import register_tools

        register_tools(server)

    cache = tools_cache_dir() / f"mcp-tools-{tools_cache_key()}.json" if cache_tools else None
    mcp = WorldtuneServer(
        register,
        cache,
        session,
        name=SERVER_NAME,
        instructions=INSTRUCTIONS,
        version=__version__,
        log_level="WARNING",
        **auth,
    )

    if bearer_token:
        from starlette.requests import Request
        from starlette.responses import JSONResponse

        @mcp.custom_route("/.well-known/oauth-protected-resource", methods=["GET"])  # type: ignore[untyped-decorator]
        async def protected_resource(request: Request) -> JSONResponse:
            """RFC 9728 metadata at the root path too (clients that do not insert the resource path look here)."""
            return JSONResponse(protected_resource_metadata(url))

    from worldtune.tools.mcp.client_hooks import RunClients

    # heartbeats per run from clients (not from a run's own in-process tools), refusals once a run is abandoned
    mcp.middleware.append(RunClients(session, beats=origin != "cli"))
    from worldtune.tools.mcp.resources import register_prompts, register_resources

    register_resources(mcp, session)
    register_prompts(mcp)
    return mcp


def protected_resource_metadata(url: str) -> dict[str, Any]:
    """What a client reads to learn how to call this server (RFC 9728): the resource and a bearer header."""
    return {
        "resource": f"{url.rstrip('/')}/mcp",
        "authorization_servers": [url.rstrip("/")],
        "bearer_methods_supported": ["header"],
        "resource_name": "worldtune MCP server (bearer token set with --token or $WORLDTUNE_MCP_TOKEN)",
    }
