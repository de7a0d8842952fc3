"""A bare install as a new user gets it: the wheel, built from the tracked files, in a fresh venv without extras.

The wheel is built from a copy of the tracked files (`git ls-files`), so a file that is only in this checkout
cannot make it pass. The fresh venv gets worldtune from that wheel with pip (`--no-index --no-deps`) and its
base dependencies, offline, by name from this venv: a `.pth` file points at a folder of links to exactly the
distributions the base requirements pull in (none of langgraph, SkyPilot, matplotlib or torch). Each command
that needs an extra must then name the extra, exit 2 and start nothing.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

pytestmark = pytest.mark.integration  # scripts/test.sh runs each file on one worker (--dist loadfile)

ROOT = Path(__file__).resolve().parents[2]
BOUND_S = 300  # one subprocess; a loaded 2-core machine builds the wheel in ~5 s and makes a venv in ~10 s
EXTRAS_ABSENT = ("langgraph", "sky", "matplotlib", "torch", "kubernetes", "optuna")


def _run(
    argv: list[str], cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=BOUND_S, check=False)


def _base_distributions() -> set[str]:
    """worldtune's base requirements and everything they require, as installed in this venv."""
    todo: list[tuple[str, str]] = [(r, "") for r in md.requires("worldtune") or []]
    seen: set[tuple[str, str]] = set()
    while todo:
        text, extra = todo.pop()
        req = Requirement(text)
        if req.marker and not req.marker.evaluate({"extra": extra}):
            continue
        name = re.sub(r"[-_.]+", "-", req.name).lower()
        for wanted in ["", *req.extras]:  # pyjwt[crypto] pulls in cryptography
            if (name, wanted) not in seen:
                seen.add((name, wanted))
                todo += [(r, wanted) for r in md.distribution(name).requires or []]
    return {name for name, _ in seen}


def _link_base_deps(target: Path) -> None:
    """Links to the top-level files of each base distribution (its packages, modules and .dist-info)."""
    target.mkdir()
    for name in _base_distributions():
        dist = md.distribution(name)
        site = Path(str(dist.locate_file("")))
        for entry in {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}:
            if entry.endswith(".pth") or entry == "__pycache__" or (target / entry).exists():
                continue
            if (site / entry).exists():
                (target / entry).symlink_to(site / entry)


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("wheel")
    src = base / "src"
    files = _run(["git", "ls-files", "-z"], cwd=ROOT).stdout.split("\0")
    for rel in filter(None, files):
        if (ROOT / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, src / rel)
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(base / "dist"),
                  str(src)])  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    assert "Warning" not in built.stderr and "warning:" not in built.stderr.lower(), built.stderr[-3000:]
    wheel = next((base / "dist").glob("worldtune-*.whl"))
    venv = base / "venv"
    made = _run([sys.executable, "-m", "venv", str(venv)])
    assert made.returncode == 0, made.stderr
    py = venv / "bin" / "python"
    installed = _run([str(py), "-m", "pip", "install", "--no-index", "--no-deps", "-q", str(wheel)])
    assert installed.returncode == 0, installed.stderr
    _link_base_deps(base / "deps")
    site = _run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    (Path(site) / "worldtune-base-deps.pth").write_text(str(base / "deps") + "\n")
    return {"wheel": wheel, "venv": venv, "home": base / "home", "db": base / "results.db"}


def _env(bare: dict[str, Path]) -> dict[str, str]:
    return {
        "PATH": f"{bare['venv'] / 'bin'}:/usr/bin:/bin",
        "HOME": str(bare["home"]),
        "XDG_CACHE_HOME": str(bare["home"] / "cache"),
        "WORLDTUNE_DB": str(bare["db"]),
        "SKYPILOT_DISABLE_USAGE_COLLECTION": "1",
        "COLUMNS": "200",
    }


def _worldtune(bare: dict[str, Path], *args: str) -> subprocess.CompletedProcess[str]:
    # cwd outside the checkout: the package must come from the wheel, not from the folders here
    return _run([str(bare["venv"] / "bin" / "worldtune"), *args], cwd=bare["home"].parent, env=_env(bare))


def test_the_wheel_carries_profiles_templates_and_data(bare: dict[str, Path]) -> None:
    names = set(zipfile.ZipFile(bare["wheel"]).namelist())
    for rel in [
        "worldtune/policies/profiles/H200.yaml",
        "worldtune/policies/profiles/B200.yaml",
        "worldtune/policies/profiles/measured/H200-1gpu-2026-11-29.yaml",
        "worldtune/policies/profiles/measured/H200-2gpu-2026-11-29.yaml",
        "worldtune/policies/guardrails.yaml",
        "worldtune/policies/published.yaml",
        "worldtune/sky/templates/calibrate.yaml",
        "worldtune/sky/lws-crd-schema.json",
        "worldtune/sky/render.py",
        "worldtune/tools/data/offers-snapshot.json",
    ]:
        assert rel in names, rel


def test_a_bare_install_lacks_the_extras_and_still_estimates(bare: dict[str, Path]) -> None:
    py = str(bare["venv"] / "bin" / "python")
    probe = (
        "import importlib.util, json; "
        f"print(json.dumps({{m: importlib.util.find_spec(m) is not None for m in {list(EXTRAS_ABSENT)!r}}}))"
    )
    found = json.loads(_run([py, "-c", probe], cwd=bare["home"].parent, env=_env(bare)).stdout)
    assert not any(found.values()), found
    version = _worldtune(bare, "--version")
    assert version.returncode == 0 and version.stdout.strip() == f"worldtune {md.version('worldtune')}"
    est = _worldtune(bare, "estimate", "--plan", "cfg2-u4-hsdp8", "--json")
    assert est.returncode == 0, est.stderr
    assert json.loads(est.stdout)["valid"] is True  # profiles and the offers snapshot came from the wheel
    measured = str(bare["venv"]) + "/lib"  # the measured profile is usable from the install itself
    path = next(Path(measured).rglob("profiles/measured/H200-1gpu-2026-11-29.yaml"))
    by_measured = _worldtune(bare, "estimate", "--plan", "1gpu", "--profile", str(path), "--json")
    assert by_measured.returncode == 0, by_measured.stderr


@pytest.mark.parametrize(
    ("args", "extra"),
    [
        (["tune", "p95 under 150 s, cheapest per clip, H200, budget $50", "--yes"], "agent"),
        (["resume", "no-such-run", "--yes"], "agent"),
        (["report", "no-such-run"], "agent"),
        (["deploy", "--gpu", "H200", "--plan", "cfg2-u4-hsdp8", "--infra", "nebius", "--dry-run"], "sky"),
        (["calibrate", "--gpu", "H200", "--infra", "nebius", "--gpus", "8", "--dry-run"], "sky"),
    ],
)
def test_each_missing_extra_is_named_with_exit_2(bare: dict[str, Path], args: list[str], extra: str) -> None:
    done = _worldtune(bare, *args)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert f"pip install 'worldtune[{extra}]'" in done.stderr, done.stderr  # literally: Rich kept the brackets
    assert "Traceback" not in done.stderr and "ModuleNotFoundError" not in done.stderr
    # nothing started: no run or deployment recorded, no SkyPilot home written
    assert _rows(bare["db"]) == 0
    assert not (bare["home"] / "cache" / "worldtune" / "sky-dryrun-home").exists()


def _rows(db: Path) -> int:
    """Runs, deployments and ledger entries in the results database (0 when it was never created)."""
    import sqlite3

    if not db.exists():
        return 0
    with sqlite3.connect(db) as con:
        tables = {t for (t,) in con.execute("select name from sqlite_master where type = 'table'")}
        return sum(con.execute(f"select count(*) from {t}").fetchone()[0]
                   for t in ("runs", "deployments", "ledger") if t in tables)  # fmt: skip


def test_mcp_start_tuning_names_the_agent_extra_and_starts_nothing(bare: dict[str, Path]) -> None:
    script = """
import anyio, json
from mcp import Client
from worldtune.agent.tuner import AgentTuner
from worldtune.tools.mcp.server import build_server

async def main():
    async with Client(build_server(tuner=AgentTuner())) as client:
        result = await client.call_tool("start_tuning", {"goal": "p95 under 150 s, cheapest per clip, H200"})
        runs = await client.call_tool("list_deployments", {})
        print(json.dumps({"error": result.is_error, "text": result.content[0].text,
                          "deployments": runs.structured_content}))

anyio.run(main)
"""
    py = str(bare["venv"] / "bin" / "python")
    done = _run([py, "-c", script], cwd=bare["home"].parent, env={**_env(bare), "PYTHONWARNINGS": "ignore"})
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["error"] is True, answer
    assert "pip install 'worldtune[agent]'" in answer["text"], answer
    assert answer["deployments"]["deployments"] == [], answer
    assert _rows(bare["db"]) == 0
