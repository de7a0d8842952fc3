"""README.md and docs/: every link resolves, every `worldtune` command and option they show exists, every
repository file they name in backticks is there, and the README stays a short front page (issue 16)."""

from __future__ import annotations

import functools
import importlib
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.core import TyperGroup

from worldtune import cli

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Linked from the README's "Read more" and written on other branches (issue 17: capacity; issue 18: node reuse).
# Remove a name here once its file is merged; the test then checks it like any other.
COMING_FROM_OTHER_BRANCHES: set[str] = set()
ENV_PREFIX = re.compile(r"^(?:\w+=(?:\$\([^)]*\)|\S+)\s+)*")  # VAR=value before a command
LINK = re.compile(r"\]\(([^)\s]+)\)")
REPO_PATH = re.compile(
    r"`((?:tools|policies|sky|agent|benchmarks|scripts|tests|worldtune|docs)/[\w./-]*(?:\.(?:py|sh|yaml|json|md|txt)|/))`"
)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {slug(line.lstrip("#")) for line in page.read_text().splitlines() if line.startswith("#")}


def command_lines(page: Path) -> list[str]:
    """Shell lines of the page (indented and fenced blocks) that start worldtune (after VAR=value), joined."""
    lines, fenced, joined = [], False, ""
    for raw in page.read_text().splitlines():
        if raw.startswith("```"):
            fenced = not fenced
            continue
        if not (fenced or raw.startswith("    ")):
            continue
        joined += raw.strip().removesuffix("\\") + " "
        if raw.rstrip().endswith("\\"):
            continue
        command = ENV_PREFIX.sub("", joined.split(" # ", 1)[0].strip())
        if re.match(r"(\.venv/bin/)?worldtune [a-z]", command):
            lines.append(command)
        joined = ""
    return lines


@functools.cache
def root_command() -> TyperGroup:
    for name in cli.COMMAND_MODULES:
        importlib.import_module(name).register(cli.app)
    group = typer.main.get_command(cli.app)
    assert isinstance(group, TyperGroup)
    return group


def test_the_readme_is_a_front_page() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines; move detail to docs/"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_links_resolve(page: Path) -> None:
    broken = []
    for target in LINK.findall(page.read_text()):
        if "://" in target:
            continue
        file, _, anchor = target.partition("#")
        found = (page.parent / file).resolve() if file else page
        if str(found.relative_to(ROOT)) in COMING_FROM_OTHER_BRANCHES:
            continue
        if not found.exists():
            broken.append(target)
        elif anchor and anchor not in anchors(found):
            broken.append(f"{target} (no heading #{anchor})")
    assert not broken, f"{page.name}: broken links {broken}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_files_named_exist(page: Path) -> None:
    text = page.read_text()
    missing = sorted({p for p in REPO_PATH.findall(text) if "*" not in p and "<" not in p and not (ROOT / p).exists()})
    missing = [p for p in missing if p not in COMING_FROM_OTHER_BRANCHES]
    assert not missing, f"{page.name} names files that are not in the repository: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_worldtune_commands_and_options_exist(page: Path) -> None:
    group = root_command()
    wrong = []
    for line in command_lines(page):
        words = shlex.split(line.split("worldtune ", 1)[1].replace("[", " ").replace("]", " ").replace("|", " "))
        command: Any = group
        while isinstance(command, TyperGroup) and words and words[0] in command.commands:
            command = command.commands[words.pop(0)]
        if command is group:
            wrong.append(f"{line!r}: no such command")
            continue
        known = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
        known |= {"-h", "--help"}
        options = [w.split("=", 1)[0] for w in words if w.startswith("-") and w != "-"]
        wrong += [f"{line!r}: {command.name} has no option {opt}" for opt in options if opt not in known]
    assert not wrong, f"{page.name}: {wrong}"


def test_the_command_check_can_fail(tmp_path: Path) -> None:
    page = tmp_path / "x.md"
    page.write_text("    .venv/bin/worldtune estimate --no-such-flag 3\n    worldtune nosuchcommand\n")
    assert command_lines(page) == [".venv/bin/worldtune estimate --no-such-flag 3", "worldtune nosuchcommand"]
    group = root_command()
    assert "--no-such-flag" not in {o for p in group.commands["estimate"].params for o in p.opts}
    assert "nosuchcommand" not in group.commands
