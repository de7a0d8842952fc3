"""ARCHITECTURE.md: dependencies point one way, agent -> tools -> (policies, sky). Read from the source's
imports (lazy ones inside functions too), so a shortcut back into the agent cannot hide in a function body."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def imported_modules(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


@pytest.mark.parametrize("room", ["tools", "policies", "sky"])
def test_no_room_below_the_agent_imports_it(room: str) -> None:
    files = sorted((ROOT / room).rglob("*.py"))
    assert files, f"no Python files under {room}/"
    offenders = {
        f"{path.relative_to(ROOT)}: {module}"
        for path in files
        for module in imported_modules(path)
        if module == "worldtune.agent" or module.startswith("worldtune.agent.")
    }
    assert not offenders, f"{room}/ must not import the agent: {sorted(offenders)}"


def test_the_check_sees_a_lazy_import(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from worldtune.agent import runner\n    return runner\n")
    assert "worldtune.agent" in imported_modules(source)


def test_sky_and_policies_do_not_reach_into_each_other() -> None:
    # both stand on the words in tools/; tools/ is where a plan, a profile and an estimate meet
    for room, other in (("sky", "worldtune.policies"), ("policies", "worldtune.sky")):
        offenders = sorted(
            f"{path.relative_to(ROOT)}: {module}"
            for path in (ROOT / room).rglob("*.py")
            for module in imported_modules(path)
            if module == other or module.startswith(other + ".")
        )
        assert not offenders, f"{room}/ must not import {other}: {offenders}"
