"""The MCP tool server: worldtune's capabilities for IDE assistants, scripts and the agent.

The tools themselves live in tools/mcp_tools.py and its families, tools/mcp_*.py. An IDE starts this
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
from typing import TYPE_CHECKING, Annotated, Any

from mcp.server import MCPServer
from mcp.server.auth.provider import AccessToken
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp_types import CallToolResult, InputRequiredResult
from mcp_types import Tool as MCPTool
from pydantic import Field, ValidationError

from worldtune import __version__
from worldtune.tools.errors import WorldtuneError

if TYPE_CHECKING:
    from mcp.server.mcpserver import Context

    from worldtune.tools.deployment import Deployment
    from worldtune.tools.store import Store
    from worldtune.tools.tuning import Tuner

log = logging.getLogger("worldtune.mcp")

SERVER_NAME = "worldtune"
INSTRUCTIONS = (
    "worldtune finds the cheapest way to serve NVIDIA Cosmos 3 world models on vLLM-Omni that meets a latency "
    "or throughput goal. Start with list_plans or estimate (free, offline predictions), deploy a plan on the "
    "twin engine (infra local, engine twin: free, no confirmation) and benchmark it with start_benchmark / "
    "get_benchmark. Anything that rents GPUs or stops a deployment needs confirm=true; call it once without "
    "to see what it would do and cost."
)
TOOLS_DIR = Path(__file__).resolve().parent


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
                headers = [(k, _bare_challenge(v) if k.lower() == b"www-authenticate" else v)
                           for k, v in message.get("headers", [])]  # fmt: skip
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_challenge)


def _bare_challenge(value: bytes) -> bytes:
    """`Bearer error=..., error_description=..., resource_metadata="U"` -> `Bearer resource_metadata="U"`."""
    parts = [p.strip() for p in value.decode().removeprefix("Bearer").split(",")]
    kept = [p for p in parts if p and not p.startswith(("error=", "error_description="))]
    return ("Bearer " + ", ".join(kept)).strip().encode()


class Session:
    """What the tools share: the results database (opened on first use, so tools/list never waits on it)."""

    def __init__(self, db_path: str | None = None, tuner: Tuner | None = None, origin: str = "mcp-local") -> None:
        self.db_path = db_path
        self.tuner = tuner
        self.origin = origin  # who the clients are, for the profile-path allow-list (tools/profile_paths.py)
        self._store: Store | None = None

    @property
    def store(self) -> Store:
        if self._store is None:
            from worldtune.tools.store import Store

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
    for path in sorted(TOOLS_DIR.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    for package in (mcp, pydantic):
        stat = Path(package.__file__ or "").stat()
        digest.update(f"{package.__name__}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:24]


class WorldtuneServer(MCPServer):
    """An MCPServer whose tools are registered on first use, with `tools/list` served from a cache."""

    def __init__(self, register_tools: Callable[[MCPServer], None], cache: Path | None, **settings: Any) -> None:
        super().__init__(**settings)
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
        return await super().call_tool(name, arguments, context)

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
        from worldtune.tools.errors import InvalidInput

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
        from worldtune.tools.mcp_tools import register_tools

        register_tools(server, session)

    cache = tools_cache_dir() / f"mcp-tools-{tools_cache_key()}.json" if cache_tools else None
    mcp = WorldtuneServer(
        register, cache, name=SERVER_NAME, instructions=INSTRUCTIONS, version=__version__, log_level="WARNING", **auth
    )

    if bearer_token:
        from starlette.requests import Request
        from starlette.responses import JSONResponse

        @mcp.custom_route("/.well-known/oauth-protected-resource", methods=["GET"])  # type: ignore[untyped-decorator]
        async def protected_resource(request: Request) -> JSONResponse:
            """RFC 9728 metadata at the root path too (clients that do not insert the resource path look here)."""
            return JSONResponse(protected_resource_metadata(url))

    # ---------- resources ----------
    @mcp.resource("worldtune://workload/anchor", mime_type="application/json")
    def anchor() -> str:
        """The anchor workload: what estimates and benchmarks use unless told otherwise (REFERENCE.md section 4)."""
        from worldtune.tools.workload import anchor_workload

        return anchor_workload().model_dump_json(indent=2)

    @mcp.resource("worldtune://profiles", mime_type="application/json")
    def profiles() -> str:
        """The calibrated performance-model profiles worldtune ships, one per GPU type."""
        from worldtune.policies.calibration import PROFILES_DIR

        return json.dumps(sorted(p.stem for p in PROFILES_DIR.glob("*.yaml")))

    @mcp.resource("worldtune://profiles/{gpu}", mime_type="application/json")
    def profile(gpu: str) -> str:
        """One GPU type's calibrated profile: effective rates, link bandwidth, fixed costs, load time, noise."""
        from worldtune.policies.calibration import shipped_profile

        try:
            return shipped_profile(gpu).model_dump_json(indent=2)
        except WorldtuneError as exc:
            raise ResourceNotFoundError(str(exc)) from exc

    @mcp.resource("worldtune://deployments", mime_type="application/json")
    def deployments() -> str:
        """Every deployment in the results database."""
        return json.dumps([d.model_dump(mode="json") for d in session.store.list_deployments()], indent=2)

    @mcp.resource("worldtune://deployments/{deployment_id}", mime_type="application/json")
    def deployment(deployment_id: str) -> str:
        """One deployment as stored."""
        found = session.store.get_deployment(deployment_id)
        if found is None:
            raise ResourceNotFoundError(f"no deployment {deployment_id!r}")
        return found.model_dump_json(indent=2)

    @mcp.resource("worldtune://results", mime_type="application/json")
    def results() -> str:
        """The newest 100 benchmarks with their headline figures."""
        from worldtune.tools.result_compare import summary_from_row

        rows = session.store.list_benchmarks(limit=100)
        return json.dumps([summary_from_row(r).model_dump(mode="json") for r in rows], indent=2)

    @mcp.resource("worldtune://results/{benchmark_id}", mime_type="application/json")
    def result(benchmark_id: str) -> str:
        """One benchmark's stored record (configuration, status, result)."""
        row = session.store.get_benchmark(benchmark_id)
        if row is None:
            raise ResourceNotFoundError(f"no benchmark {benchmark_id!r}")
        return json.dumps(row, indent=2, default=str)

    @mcp.resource("worldtune://guardrails", mime_type="application/json")
    def guardrails() -> str:
        """The budget guardrails in force (policies/guardrails.yaml with $WORLDTUNE_GUARDRAILS over it)."""
        from worldtune.tools.spend import load_guardrails

        try:
            return load_guardrails().model_dump_json(indent=2)
        except WorldtuneError as exc:
            raise ResourceError(str(exc)) from exc

    # ---------- prompts ----------
    @mcp.prompt(title="Cheapest plan under a latency bound")
    def cheapest_plan_under_latency(
        latency_bound_s: Annotated[str, Field(description="most seconds one clip may take, e.g. 100")],
        model: Annotated[
            str, Field(description="cosmos3-super | cosmos3-nano | cosmos3-edge | cosmos3-super-i2v-4step")
        ] = "cosmos3-super",
        gpu: Annotated[str, Field(description="GPU type: H200 or B200")] = "H200",
    ) -> str:
        """Find the cheapest plan per clip whose predicted latency stays under a bound, then check it on the twin."""
        return (
            f"Find the cheapest way to serve {model} on {gpu} GPUs with latency per clip at most {latency_bound_s} s "
            "on the anchor workload.\n"
            f"1. Call list_plans with model={model}, gpu={gpu}, latency_bound_s={latency_bound_s}, sort=cost "
            "(try gpus=8, then 4, 2 and 1).\n"
            "2. Report the best plan of each GPU count: latency, cost per clip, clips per hour, the offer.\n"
            "3. Deploy the overall best on the twin (deploy infra=local engine=twin time_scale=200), run "
            "start_benchmark with steps=35 repeats=3, poll get_benchmark until completed, and compare the measured "
            "latency with the prediction.\n"
            "4. Tear the twin down (teardown confirm=true). Do not rent GPUs without asking me."
        )

    @mcp.prompt(title="Compare benchmark results")
    def compare_benchmarks(
        benchmark_ids: Annotated[
            str, Field(description="benchmark ids, comma-separated, the base first (list_results lists them)")
        ],
    ) -> str:
        """Compare stored benchmark results and say which deployment to keep."""
        return (
            f"Compare the benchmark results {benchmark_ids} with compare_results (the first is the base). "
            "Say which is fastest at p50 and (where claimable) p95, which makes the most clips per hour, and which "
            "is cheapest per clip given each deployment's price per hour (get_deployment). Quote the figures."
        )

    return mcp


def protected_resource_metadata(url: str) -> dict[str, Any]:
    """What a client reads to learn how to call this server (RFC 9728): the resource and a bearer header."""
    return {
        "resource": f"{url.rstrip('/')}/mcp",
        "authorization_servers": [url.rstrip("/")],
        "bearer_methods_supported": ["header"],
        "resource_name": "worldtune MCP server (bearer token set with --token or $WORLDTUNE_MCP_TOKEN)",
    }
