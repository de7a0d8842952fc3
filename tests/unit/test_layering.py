"""ARCHITECTURE.md and issue 16: dependencies point one way. The words (pydantic models and parsers in tools/)
import nothing above them; policies/ and sky/ import only words; capabilities (the rest of tools/) may use
policies and sky; agent/ imports tools and the search policy; nothing imports the agent (the `worldtune`
command line in worldtune/ is the entry point above every room).

Read from the source (lazy imports inside functions too, TYPE_CHECKING ones too) and from module-name strings
such as `import_module("worldtune.sky.backend")`, so a shortcut cannot hide in a function body or a string.
Where today's code breaks a rule, KNOWN_EXCEPTIONS names the import and why: the list can only shrink (a
listed import that is gone fails the test until it is taken off the list)."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ROOMS = ("tools", "policies", "sky", "agent")
# tools/ is rooms of its own (tools/words/, tools/mcp/, tools/store/, ...): a package, not a module
TOOLS_ROOMS = sorted(p.parent.name for p in (ROOT / "tools").glob("*/__init__.py"))
PACKAGES = {f"worldtune.{room}" for room in ROOMS} | {f"worldtune.tools.{room}" for room in TOOLS_ROOMS}
PACKAGES |= {"worldtune.policies.search"}  # the search: one package (issue 38)
MODULE_STRING = re.compile(r"worldtune\.(?:tools|policies|sky|agent)(?:\.[A-Za-z_]\w*)*")

# The words: every module of tools/words/ (and the tools package itself, which only names the room).
WORDS = {"worldtune.tools", "worldtune.tools.words"} | {
    f"worldtune.tools.words.{path.stem}" for path in (ROOT / "tools" / "words").glob("*.py") if path.stem != "__init__"
}
SEARCH_POLICY = {"worldtune.policies", "worldtune.policies.search"}

# (importing file, imported module) -> why it is still there. Remove an entry when its import is gone.
KNOWN_EXCEPTIONS: dict[tuple[str, str], str] = {}


def imported_modules(path: Path) -> set[str]:
    """Every worldtune module `path` imports, by statement or by a module-name string."""
    return _modules_in(ast.parse(path.read_text(), str(path)))


def _modules_in(tree: ast.AST) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module in PACKAGES:  # from worldtune.tools.words import stats
                found |= {f"{node.module}.{alias.name}" for alias in node.names}
            else:
                found.add(node.module)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and MODULE_STRING.fullmatch(node.value):
            found.add(node.value)
    return found


def module_of(name: str) -> str:
    """worldtune.tools.words.plan.Plan -> worldtune.tools.words.plan, worldtune.sky.render.x -> worldtune.sky.render
    (a room's module, the unit the rules speak of)."""
    return ".".join(name.split(".")[: 4 if name.startswith("worldtune.tools.") else 3])


def dependencies(room: str) -> set[tuple[str, str]]:
    files = sorted((ROOT / room).rglob("*.py"))
    assert files, f"no Python files under {room}/"
    return {
        (str(path.relative_to(ROOT)), module_of(module))
        for path in files
        for module in imported_modules(path)
        if module.startswith("worldtune.") and not module.startswith("worldtune.cli")
    }


def in_room(module: str, room: str) -> bool:
    return module == f"worldtune.{room}" or module.startswith(f"worldtune.{room}.")


def offenders(found: set[tuple[str, str]]) -> list[str]:
    return sorted(f"{file}: {module}" for file, module in found if (file, module) not in KNOWN_EXCEPTIONS)


@pytest.mark.parametrize("room", ["tools", "policies", "sky"])
def test_no_room_below_the_agent_imports_it(room: str) -> None:
    found = {(f, m) for f, m in dependencies(room) if in_room(m, "agent")}
    assert not offenders(found), f"{room}/ must not import the agent: {offenders(found)}"


def test_words_import_only_words() -> None:
    words = {(f, m) for f, m in dependencies("tools") if "worldtune." + f[:-3].replace("/", ".") in WORDS}
    assert words, "no word modules found"
    found = {(f, m) for f, m in words if m not in WORDS}
    assert not offenders(found), f"a word imports something above the words: {offenders(found)}"


@pytest.mark.parametrize("room", ["policies", "sky"])
def test_policies_and_sky_import_only_words(room: str) -> None:
    found = {(f, m) for f, m in dependencies(room) if not in_room(m, room) and m not in WORDS}
    assert not offenders(found), f"{room}/ may import only its own room and the words: {offenders(found)}"


def test_the_agent_imports_tools_and_the_search_policy() -> None:
    found = {(f, m) for f, m in dependencies("agent") if not (in_room(m, "agent") or in_room(m, "tools"))}
    found -= {(f, m) for f, m in found if m in SEARCH_POLICY}
    assert not offenders(found), f"agent/ may import only tools/ and policies.search: {offenders(found)}"


# Issue 16 item 5: the agent reaches the world and the database only through the MCP tools. No agent module opens
# the results database (tools/store/database.py and its record families, tools/store/*.py): a run's record, its fleet
# rehearsal's twins and samples and the report's data go through the MCP tools and the capabilities behind them
# (tools/runs/tuning_jobs.py, tools/runs/run_records.py, tools/deployments/fleet_rehearsal.py,
# tools/results/report_data.py).
def agent_modules_opening_the_database() -> list[str]:
    return sorted(
        f"{file}: {module}"
        for file, module in dependencies("agent")
        if in_room(module, "tools.store") and module != "worldtune.tools.store.db_path"
    )


def test_the_agent_reaches_the_database_only_through_mcp() -> None:
    found = agent_modules_opening_the_database()
    assert not found, f"open the database through the MCP tools: {found}"


def test_the_database_check_finds_an_agent_module_that_opens_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "agent").mkdir()
    (tmp_path / "agent" / "fine.py").write_text("from worldtune.tools.store.db_path import default_db_path\n")
    (tmp_path / "agent" / "lazy.py").write_text(
        "def f():\n    from worldtune.tools.store.database import Store\n    return Store\n"
    )
    (tmp_path / "agent" / "named.py").write_text("NAME = 'worldtune.tools.store.runs'\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert agent_modules_opening_the_database() == [
        "agent/lazy.py: worldtune.tools.store.database",
        "agent/named.py: worldtune.tools.store.runs",
    ]


def test_known_exceptions_only_shrink() -> None:
    present = set().union(*(dependencies(room) for room in ROOMS))
    gone = sorted(f"{file}: {module}" for file, module in KNOWN_EXCEPTIONS if (file, module) not in present)
    assert not gone, f"fixed, take them off KNOWN_EXCEPTIONS: {gone}"


def test_the_check_sees_a_lazy_import_and_a_module_string(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "import importlib\n"
        "def f():\n    from worldtune.agent import runner\n    return runner\n"
        "BACKEND = ('worldtune.sky.backend', 'SkyPilotBackend')\n"
        "def g():\n    return importlib.import_module(BACKEND[0])\n"
        "def h():\n    return 'worldtune.db is a file name, worldtune.sky a word in a sentence'\n"
    )
    found = imported_modules(source)
    assert {"worldtune.agent.runner", "worldtune.sky.backend"} <= found
    assert not any("db" in m for m in found)


def test_sky_and_policies_do_not_reach_into_each_other() -> None:
    # both stand on the words in tools/; tools/ is where a plan, a profile and an estimate meet
    for room, other in (("sky", "policies"), ("policies", "sky")):
        found = {(f, m) for f, m in dependencies(room) if in_room(m, other)}
        assert not offenders(found), f"{room}/ must not import worldtune.{other}: {offenders(found)}"


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[1:] if rel.parts[0] == "worldtune" else rel.parts
    return ".".join(("worldtune", *parts)).removesuffix(".__init__")


def _imports_for_cycles(path: Path, known: set[str]) -> set[str]:
    """What `path` imports, resolved to modules of the package: statements (lazy ones too) and module-name
    strings, except a module a child process is started with (`python -m NAME`) and type-only imports, which
    do not import anything when the code runs."""
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):  # a type-only import (under `if TYPE_CHECKING:`) never runs
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            node.body = [ast.Pass()]
    launched = {
        seq.elts[i + 1].value
        for seq in ast.walk(tree)
        if isinstance(seq, (ast.List, ast.Tuple))
        for i, item in enumerate(seq.elts[:-1])
        if isinstance(item, ast.Constant) and item.value == "-m" and isinstance(seq.elts[i + 1], ast.Constant)
    }
    found = set()
    for name in _modules_in(tree) - launched:
        while name and name not in known:  # worldtune.tools.words.plan.Plan -> worldtune.tools.words.plan
            name = name.rpartition(".")[0]
        if name:
            found.add(name)
    return found


def import_cycles() -> list[list[str]]:
    """Every set of package modules that import each other around a circle (Tarjan's strongly connected
    components of the import graph, of more than one module)."""
    files = {_module_name(p): p for room in (*ROOMS, "worldtune") for p in (ROOT / room).rglob("*.py")}
    known = set(files) | {"worldtune"}
    graph = {m: _imports_for_cycles(p, known) - {m, "worldtune"} for m, p in files.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_no_import_cycle() -> None:
    """Issue 16: no circle of imports anywhere in the package (the search's facade, a benchmark and its lock, the
    agent's tools client, runner and graph, the goal parser and its traffic rules, the SkyPilot backend and its
    serve job, the Kubernetes backend and its replan each used to close one)."""
    assert import_cycles() == []


def test_the_cycle_check_finds_a_circle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for room in (*ROOMS, "worldtune"):
        (tmp_path / room).mkdir()
    (tmp_path / "tools" / "a.py").write_text("def f():\n    from worldtune.tools.b import g\n")
    (tmp_path / "tools" / "b.py").write_text("from worldtune.tools import a\n")
    (tmp_path / "agent" / "run.py").write_text("ARGV = ['python', '-m', 'worldtune.agent.child']\n")
    (tmp_path / "agent" / "child.py").write_text("from worldtune.agent.run import ARGV\n")
    (tmp_path / "sky" / "x.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from worldtune.sky.y import Y\n"
    )
    (tmp_path / "sky" / "y.py").write_text("from worldtune.sky.x import f\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert import_cycles() == [["worldtune.tools.a", "worldtune.tools.b"]]


# ---- issue 27: tools/ is rooms -----------------------------------------------------------------------------------
# What each room of tools/ may import besides itself (each room's __init__ docstring says the same in words). The
# words stand on nothing; the store on the words; the MCP layer may use every room and no room uses it.
TOOLS_ROOM_MAY_IMPORT: dict[str, set[str]] = {
    "words": set(),
    "store": {"words"},
    "plans": {"words", "policies"},
    "twin": {"words", "policies", "plans", "store"},
    "backends": {"words", "policies", "sky", "plans", "store"},
    "results": {"words", "policies", "sky", "store", "deployments"},
    "bench": {"words", "policies", "plans", "store", "twin", "results", "backends", "deployments"},
    "deployments": {"words", "policies", "sky", "plans", "store", "bench", "backends"},
    "runs": {"words", "sky", "store", "bench", "deployments"},
    "mcp": {"words", "policies", "plans", "store", "twin", "backends", "results", "bench", "deployments", "runs"},
}


def room_of(module: str) -> str:
    """worldtune.tools.mcp.server -> mcp, worldtune.policies.search -> policies, worldtune.tools -> words (the
    package that only names the rooms)."""
    parts = module.split(".")
    if parts[1] != "tools":
        return parts[1]
    return parts[2] if len(parts) > 2 and parts[2] in TOOLS_ROOMS else "words"


def tools_room_offenders() -> list[str]:
    found = []
    for file, module in dependencies("tools"):
        parts = Path(file).parts
        room = parts[1] if len(parts) > 2 else "words"
        other = room_of(module)
        if other != room and other not in TOOLS_ROOM_MAY_IMPORT.get(room, set()):
            found.append(f"{file}: {module} (tools/{room}/ may import {sorted(TOOLS_ROOM_MAY_IMPORT.get(room, ()))})")
    return sorted(found)


def test_every_room_of_tools_is_known_and_says_what_lives_there() -> None:
    rooms = set(TOOLS_ROOMS)
    assert rooms == set(TOOLS_ROOM_MAY_IMPORT), f"say what a new room may import: {rooms ^ set(TOOLS_ROOM_MAY_IMPORT)}"
    for room in rooms:
        doc = ast.get_docstring(ast.parse((ROOT / "tools" / room / "__init__.py").read_text()))
        assert doc and "import" in doc, f"tools/{room}/__init__.py: say what lives there and what it may import"


def test_no_module_sits_in_the_tools_root() -> None:
    loose = sorted(p.name for p in (ROOT / "tools").glob("*.py") if p.name != "__init__.py")
    assert not loose, f"put these in a room of tools/ (docs/layout.md): {loose}"


def test_each_room_of_tools_imports_only_the_rooms_it_may() -> None:
    assert not tools_room_offenders(), tools_room_offenders()


def test_the_room_check_finds_a_room_reaching_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for room in ("store", "mcp"):
        (tmp_path / "tools" / room).mkdir(parents=True)
        (tmp_path / "tools" / room / "__init__.py").write_text('"""x"""\n')
    (tmp_path / "tools" / "store" / "bad.py").write_text("def f():\n    from worldtune.tools.mcp.server import x\n")
    (tmp_path / "tools" / "mcp" / "fine.py").write_text("from worldtune.tools.store.database import Store\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert [o.split(" (")[0] for o in tools_room_offenders()] == ["tools/store/bad.py: worldtune.tools.mcp.server"]


def private_reaches(tree: ast.AST) -> list[str]:
    """Names starting with one underscore taken from another worldtune module: `from worldtune.x import _y`, or
    `m._y` where `m` was imported as a worldtune module (`import worldtune.x as m`, `from worldtune import x as m`)."""
    found: list[str] = []
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("worldtune"):
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"line {node.lineno}: from {node.module} import {alias.name}")
                modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            modules |= {alias.asname for alias in node.names if alias.name.startswith("worldtune") and alias.asname}
    for node in ast.walk(tree):
        named = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules
        if named and node.attr.startswith("_") and not node.attr.startswith("__"):
            found.append(f"line {node.lineno}: {node.value.id}.{node.attr}")
    return found


def test_no_module_reaches_into_another_modules_private_names() -> None:
    """Issue 38: what a module keeps to itself (one leading underscore) is used only there."""
    found = [
        f"{path.relative_to(ROOT)} {reach}"
        for room in (*ROOMS, "worldtune")
        for path in sorted((ROOT / room).rglob("*.py"))
        for reach in private_reaches(ast.parse(path.read_text(), str(path)))
    ]
    assert found == []


def test_the_private_name_check_finds_a_reach() -> None:
    source = (
        "from worldtune.sky import backend\nfrom worldtune.tools.runs.stopping import _Control\nbackend._get_within()\n"
    )
    assert private_reaches(ast.parse(source)) == [
        "line 2: from worldtune.tools.runs.stopping import _Control",
        "line 3: backend._get_within",
    ]


def test_every_package_folder_ships_in_the_wheel() -> None:
    """pyproject lists the packages one by one (package-dir maps the rooms onto worldtune.*): a folder with Python
    modules left off the list is missing from the wheel, and an installed worldtune fails to import it (a new room,
    tools/runs/, once was: only the wheel install test caught it, in the full suite)."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    roots = {folder: name for name, folder in config["package-dir"].items()}
    missing = []
    for folder, name in roots.items():
        for module in (ROOT / folder).rglob("*.py"):
            rel = module.parent.relative_to(ROOT / folder)
            if "__pycache__" in rel.parts:
                continue
            package = ".".join([name, *rel.parts])
            if package not in listed:
                missing.append(package)
    assert not sorted(set(missing)), f"add to pyproject's packages: {sorted(set(missing))}"
