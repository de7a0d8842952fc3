"""An outside MCP client: the MCP Inspector CLI from npm lists the tools over stdio and calls `estimate`.

scripts/test.sh installs the pinned Inspector under .cache/npm (INSPECTOR_VERSION there); this test
uses that install and fails, saying how to install it, when it is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
INSPECTOR = ROOT / ".cache" / "npm" / "node_modules" / ".bin" / "mcp-inspector"
WORLDTUNE = Path(sys.executable).parent / "worldtune"


def inspector(tmp_path: Path, *args: str, exit_code: int = 0) -> dict[str, object]:
    """Run the Inspector CLI against `worldtune mcp` over stdio; return its JSON answer."""
    if not INSPECTOR.exists():
        pytest.fail(f"{INSPECTOR} is missing: run scripts/test.sh (it installs the pinned MCP Inspector)")
    assert shutil.which("node"), "node is needed for the MCP Inspector"
    env = {
        **os.environ,
        "SKYPILOT_DISABLE_USAGE_COLLECTION": "1",
        # keep the Inspector's catalog and client config out of the user's home
        "MCP_CATALOG_PATH": str(tmp_path / "inspector" / "mcp.json"),
        "MCP_CLIENT_CONFIG_PATH": str(tmp_path / "inspector" / "client.json"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    server = [str(WORLDTUNE), "mcp", "--db", str(tmp_path / "results.db")]
    done = subprocess.run(
        [str(INSPECTOR), "--cli", *server, *args], env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == exit_code, f"inspector exited {done.returncode}: {done.stderr[-2000:]}"
    answer: dict[str, object] = json.loads(done.stdout)
    return answer


def test_inspector_lists_the_tools(tmp_path: Path) -> None:
    answer = inspector(tmp_path, "--method", "tools/list")
    tools = {t["name"]: t for t in answer["tools"]}  # type: ignore[attr-defined]
    assert {"estimate", "list_plans", "deploy", "start_benchmark", "get_benchmark", "teardown"} <= set(tools)
    assert tools["estimate"]["inputSchema"]["required"] == ["plan"]
    assert tools["estimate"]["outputSchema"]["type"] == "object"
    assert tools["teardown"]["annotations"]["destructiveHint"] is True
    assert tools["estimate"]["annotations"]["readOnlyHint"] is True


def test_inspector_calls_estimate(tmp_path: Path) -> None:
    args = {"model": "cosmos3-super", "gpu": "H200", "plan": "cfg2-u4-hsdp8", "steps": 35}
    answer = inspector(
        tmp_path, "--method", "tools/call", "--tool-name", "estimate", "--tool-args-json", json.dumps(args)
    )
    assert answer["isError"] is False
    got = answer["structuredContent"]
    assert got["valid"] is True and got["plan"] == "cfg2-u4-hsdp8" and got["steps"] == 35  # type: ignore[index]
    assert 30 < got["latency_s"] < 600 and got["usd_per_clip"] > 0  # type: ignore[index,operator]


def test_inspector_sees_a_readable_error(tmp_path: Path) -> None:
    args = {"plan": "cfg2-u4-hsdp8", "gpu": "Z100"}
    answer = inspector(
        tmp_path, "--method", "tools/call", "--tool-name", "estimate", "--tool-args-json", json.dumps(args),
        exit_code=5,  # the Inspector's exit status for a tool result with isError
    )  # fmt: skip
    assert answer["isError"] is True
    assert "gpu='Z100' is not valid" in answer["content"][0]["text"]  # type: ignore[index]


def test_inspector_passes_the_environment_only_with_e(tmp_path: Path) -> None:
    # The Inspector starts the server with an environment of its own: what the README's -e flags carry
    # is what reaches it (the database the server opens on first use shows which one it got).
    inherited, passed = tmp_path / "inherited.db", tmp_path / "passed.db"
    env_db = {"WORLDTUNE_DB": str(inherited)}
    server = [str(WORLDTUNE), "mcp"]
    for extra in ([], ["-e", f"WORLDTUNE_DB={passed}", "-e", "SKYPILOT_DISABLE_USAGE_COLLECTION=1"]):
        env = {
            **os.environ,
            **env_db,
            "MCP_CATALOG_PATH": str(tmp_path / "c.json"),
            "MCP_CLIENT_CONFIG_PATH": str(tmp_path / "cl.json"),
            "XDG_CACHE_HOME": str(tmp_path / "cache"),
        }
        done = subprocess.run(
            [str(INSPECTOR), "--cli", *extra, *server, "--method", "tools/call", "--tool-name", "list_results",
             "--tool-args-json", "{}"],
            env=env, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
    assert passed.exists(), "the -e WORLDTUNE_DB did not reach the server"
    assert not inherited.exists(), "the Inspector passed the parent's environment after all: the README's -e is moot"


def test_inspector_shows_titles(tmp_path: Path) -> None:
    answer = inspector(tmp_path, "--method", "tools/list")
    assert all(t.get("title") for t in answer["tools"]), answer  # type: ignore[attr-defined]
