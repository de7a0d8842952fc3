"""The MCP layer's shape (issues 16 and 27): one small module per capability family, its tools module-level
functions decorated with `@tool`, every family found and registered by tools/mcp/registry.register_tools; the
cached tool listing is rebuilt when any of them changes."""

from __future__ import annotations

import ast
import asyncio
import importlib
import shutil
from pathlib import Path

import pytest

from worldtune.tools.mcp import registry
from worldtune.tools.mcp import server as mcp_server
from worldtune.tools.mcp.common import TOOLS

MCP_DIR = Path(mcp_server.__file__).resolve().parent
# not tool families: the server, the wiring, what families share, the resources and prompts, the middleware
SHARED = {"__init__", *registry.SHARED}
FAMILIES = sorted(p.stem for p in MCP_DIR.glob("*.py") if p.stem not in SHARED)


def test_every_family_registers_its_tools_and_register_tools_wires_them_all() -> None:
    assert FAMILIES, "no tools/mcp/<family>.py modules"
    names: list[str] = []
    assert registry.families() == [f"worldtune.tools.mcp.{family}" for family in FAMILIES]
    for family in FAMILIES:
        module = importlib.import_module(f"worldtune.tools.mcp.{family}")
        mine = [fn for fn, _title, _hints in TOOLS.values() if fn.__module__ == module.__name__]
        assert mine, f"{family} decorates no tool"
        names += [fn.__name__ for fn in mine]
    assert len(names) == len(set(names)), "a tool is registered by two families"
    listed = asyncio.run(mcp_server.build_server().list_tools())
    assert sorted(t.name for t in listed) == sorted(names)


@pytest.mark.parametrize("family", [*FAMILIES, *sorted(SHARED)])
def test_the_mcp_modules_are_small_and_their_functions_short(family: str) -> None:
    path = MCP_DIR / f"{family}.py"
    source = path.read_text()
    assert len(source.splitlines()) <= 400, f"{path.name} has {len(source.splitlines())} lines"
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            assert length <= 80, f"{path.name}:{node.lineno} {node.name} has {length} lines"


def test_the_cached_listing_key_follows_every_family_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    copy = tmp_path / "tools"
    shutil.copytree(mcp_server.TOOLS_DIR, copy, ignore=shutil.ignore_patterns("__pycache__", "data"))
    monkeypatch.setattr(mcp_server, "TOOLS_DIR", copy)
    before = mcp_server.tools_cache_key()
    assert mcp_server.tools_cache_key() == before
    family = copy / "mcp" / f"{FAMILIES[0]}.py"
    family.write_text(family.read_text() + "\n# changed\n")
    changed = mcp_server.tools_cache_key()
    assert changed != before
    (copy / "mcp" / "new_family.py").write_text("# a family another branch adds\n")
    assert mcp_server.tools_cache_key() != changed
