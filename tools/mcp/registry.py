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
import pkgutil

from mcp.server import MCPServer

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
