"""The MCP tools: thin, typed wrappers over worldtune's plain functions, registered on the server.

Every tool's parameters are flat and named as on the command line; its return type is a pydantic
model (clients get an outputSchema and structured content); a bad argument becomes a readable tool
error with nothing spent. Tools that rent GPUs or stop things need `confirm=true`; without it they
answer with what they would do and what it would cost. tools/mcp/server.py imports this module only
when a client calls a tool (or lists tools with no cached listing), so start-up stays fast.

One module per capability family holds its tools (tools/mcp/<family>.py: module-level functions decorated with
`@tool(title, annotations)`); what they share (annotations, flat arguments, refusals, progress, `@tool`) is
tools/mcp/common.py. Every module of tools/mcp/ that is not shared is a family: adding one is adding the file.
The domain logic is in the capabilities they call (tools/plans/frontier.py, tools/bench/request.py,
tools/results/compare.py, ...).
"""

from __future__ import annotations

import importlib
import json
import math
import pkgutil
from typing import Any

from mcp.server import MCPServer
from mcp.server.mcpserver.tools.base import Tool
from pydantic import ConfigDict

# the modules of tools/mcp/ that hold no tools: the server, its session, resources and prompts, what families share,
# and the middleware that counts a call carrying a run id as its client's heartbeat (client_hooks.py)
SHARED = frozenset({"server", "session", "resources", "common", "registry", "client_hooks"})


def families() -> list[str]:
    """Every tool family module of tools/mcp/, by name."""
    import worldtune.tools.mcp as package

    return sorted(
        f"{package.__name__}.{m.name}" for m in pkgutil.iter_modules(package.__path__) if m.name not in SHARED
    )


def register_tools(mcp: MCPServer) -> None:
    """Add every worldtune tool to `mcp`, family by family, each as its module defines it."""
    from worldtune.tools.mcp.common import TOOLS

    for family in families():
        importlib.import_module(family)
        for name, (fn, title, hints) in TOOLS.items():
            if name.rpartition(".")[0] == family:
                mcp.tool(title=title, annotations=hints)(fn)
                tool = mcp._tool_manager.get_tool(fn.__name__)  # mcp==2.3.0 (pinned): the Tool just made
                if tool is not None:
                    strict_arguments(tool)


def strict_arguments(tool: Tool) -> None:
    """A tool's arguments as a user meant them or refused (issue 36): an unknown or misspelt field (`stpes`) is an
    error naming it, not dropped, and a value of the wrong type (`gpus: "8"`) is refused, not coerced.

    The SDK builds each tool's argument model from its signature with pydantic's defaults (extra fields ignored,
    lax types); this swaps in a subclass that forbids extras and is strict, and publishes its schema
    (`additionalProperties: false`), so clients see the rule before they call. A whole number still passes
    for a float (JSON has one number type), and a list sent as a JSON string is still read (the SDK's own
    pre-parse, for clients that send it so).
    """
    base = tool.fn_metadata.arg_model
    config = ConfigDict(**base.model_config)
    config["extra"] = "forbid"
    config["strict"] = True

    def as_json(cls: Any, obj: Any, /, **kwargs: Any) -> Any:
        # strict on JSON's own types: in Python mode strict would refuse a JSON array for a tuple field
        if not isinstance(obj, dict):
            return base.model_validate.__func__(cls, obj, **kwargs)  # type: ignore[attr-defined]
        return cls.model_validate_json(json.dumps(_finite(obj), allow_nan=False, default=_unserialisable))

    namespace = {
        "model_config": config,
        "__module__": base.__module__,
        "model_validate": classmethod(as_json),
    }
    strict: Any = type(base.__name__, (base,), namespace)  # the SDK's name, so its errors read as before
    tool.fn_metadata.arg_model = strict
    tool.parameters = strict.model_json_schema(by_alias=True)


def _finite(value: Any) -> Any:
    """Arguments with a non-finite float (a JSON 1e400 parses to inf) as the string it was, so the strict number
    check refuses it naming the field instead of json.dumps failing."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _unserialisable(value: Any) -> Any:
    raise TypeError(f"a value of type {type(value).__name__} is not JSON")
