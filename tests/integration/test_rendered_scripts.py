"""The rendered `setup` and `run` scripts, executed as a SkyPilot node would (SkyServe cannot run here).

A scratch HOME is laid out as SkyPilot lays out a cluster: the task's workdir synced to ~/sky_workdir (when
the task has one), setup and run executed by bash there (else in ~), the task's envs and secrets in the
environment. What only a GPU node has is stood in for by shims on PATH, named so: `vllm` (runs
`worldtune twin` with the flags the rendered command gives it, `--api-key` included), and for `python3` only
the two calls that need the cloud (`-m venv`, whose pip is this venv's real pip working offline against
local wheels, and the Hugging Face download). Everything else runs for real: bash, pip, the readiness loop.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from worldtune.sky import render
from worldtune.tools.backends.local import free_port
from worldtune.tools.deployments.preview import build_deployment, render_options
from worldtune.tools.words.deployment import API_KEY_ENV

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
BOUND_S = 120  # setup runs pip once; the twin loads in 2 model s at time scale 1000
KEY = "test-key-0123456789"


def _shims(folder: Path, wheels: Path) -> Path:
    """vllm and python3 stand-ins (see the module docstring); returns the folder to put first on PATH."""
    folder.mkdir(parents=True)
    real_python = shutil.which("python3") or sys.executable
    (folder / "python3").write_text(f"""#!/bin/bash
# SHIM python3: only the cloud-bound calls are stood in for; everything else is the real interpreter
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then
  mkdir -p "$3/bin" "$3/site"
  printf '#!/bin/bash\\nexec {VENV_BIN}/pip "$1" --no-deps --no-index --no-build-isolation --find-links {wheels} \\
--target "%s/site" "${{@:2}}"\\n' "$3" > "$3/bin/pip"
  chmod +x "$3/bin/pip"; exit 0
fi
case "$2" in *snapshot_download*) echo "$HOME/.cache/huggingface/hub/fake"; exit 0;; esac
exec {real_python} "$@"
""")
    (folder / "vllm").write_text(f"""#!/bin/bash
# SHIM vllm: `vllm serve MODEL --omni --host H --port P ... --api-key K` runs the twin with the same port and key
port=""; key=""; prev=""
for a in "$@"; do
  [ "$prev" = "--port" ] && port="$a"; [ "$prev" = "--api-key" ] && key="$a"; prev="$a"
done
exec {VENV_BIN}/worldtune twin --port "$port" --plan "$TWIN_PLAN" --time-scale 1000 --load-time 2 --api-key "$key"
""")
    for shim in folder.iterdir():
        shim.chmod(0o755)
    return folder


def _node(tmp_path: Path, task: dict[str, Any]) -> tuple[Path, Path, dict[str, str]]:
    """HOME, the directory SkyPilot runs setup/run in, and the environment it gives them."""
    home = tmp_path / "home"
    home.mkdir()
    cwd = home
    if task.get("workdir"):
        cwd = home / "sky_workdir"
        shutil.copytree(task["workdir"], cwd, ignore=shutil.ignore_patterns(".venv", ".cache", ".git", "build"))
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    env = {
        "HOME": str(home),
        "PATH": f"{_shims(tmp_path / 'shims', wheels)}:{VENV_BIN}:/usr/bin:/bin",
        "SKYPILOT_TASK_ID": "sky-test-task",
        "SKYPILOT_DISABLE_USAGE_COLLECTION": "1",
        **{k: str(v) for k, v in (task.get("envs") or {}).items()},
    }
    for name in task.get("secrets") or {}:
        env[name] = KEY if name == API_KEY_ENV else "hf_dummy_not_used"
    return home, cwd, env


def _setup(task: dict[str, Any], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", task["setup"]], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=BOUND_S)  # fmt: skip


def test_service_setup_runs_on_a_replica_without_a_workdir(tmp_path: Path) -> None:
    deployment = build_deployment("H200", "2xtp4", infra="nebius", capacity="serverless")
    service = render.render_service(deployment, render_options(deployment, render.RenderOptions(ship_worldtune=True)))
    assert "workdir" not in service and "pip install --quiet ." not in service["setup"]
    _, cwd, env = _node(tmp_path, service)
    done = _setup(service, cwd, env)
    assert done.returncode == 0, done.stdout + done.stderr


def test_task_rendered_from_a_wheel_install_sets_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a wheel install has no checkout to ship: setup installs the released package of this version instead
    monkeypatch.setattr(render, "shipped_checkout", lambda: None)
    deployment = build_deployment("H200", "cfg2-u4-hsdp8", infra="nebius")
    task = render.render_task(deployment, render_options(deployment, render.RenderOptions(ship_worldtune=True)))
    assert "workdir" not in task
    _, cwd, env = _node(tmp_path, task)
    wheel = [str(VENV_BIN / "pip"), "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path / "wheels")]
    built = subprocess.run([*wheel, str(ROOT)], capture_output=True, text=True, timeout=BOUND_S)
    assert built.returncode == 0, built.stderr[-2000:]
    shutil.rmtree(ROOT / "build", ignore_errors=True)
    done = _setup(task, cwd, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert list((Path(env["HOME"]) / ".worldtune-venv" / "site").glob("worldtune-*.dist-info"))


def test_run_script_starts_servers_that_the_api_key_guards(tmp_path: Path) -> None:
    deployment = build_deployment("H200", "2xtp4", infra="nebius")
    port = free_port()
    task = render.render_task(
        deployment, render_options(deployment, render.RenderOptions(ship_worldtune=True, base_port=port))
    )
    assert f'--api-key "${API_KEY_ENV}"' in task["run"] and API_KEY_ENV in task["secrets"]
    assert KEY not in task["run"] + task["setup"]  # files carry the secret's name only
    _, cwd, env = _node(tmp_path, task)
    assert _setup(task, cwd, env).returncode == 0
    env["TWIN_PLAN"] = "tp4"
    proc = subprocess.Popen(["bash", "-c", task["run"]], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)  # fmt: skip
    try:
        lines = _until(proc, render.ALL_READY_MARKER)
        assert sum(render.READY_MARKER + " " in line for line in lines) == 2, lines
        for p in (port, port + 1):
            base = f"http://127.0.0.1:{p}"
            assert httpx.get(f"{base}/v1/models", timeout=10).status_code == 401
            wrong = httpx.get(f"{base}/v1/models", headers={"Authorization": "Bearer nope"}, timeout=10)
            assert wrong.status_code == 401
            right = httpx.get(f"{base}/v1/models", headers={"Authorization": f"Bearer {KEY}"}, timeout=10)
            assert right.status_code == 200, right.text
            assert httpx.get(f"{base}/health", timeout=10).status_code == 200  # as vLLM: outside the guard
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def _until(proc: subprocess.Popen[str], marker: str) -> list[str]:
    """The run script's output up to the marker line (bounded by the script's own start-up allowance)."""
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + BOUND_S
    for line in proc.stdout:
        lines.append(line.rstrip())
        if line.startswith(marker):
            return lines
        assert time.monotonic() < deadline, lines
    raise AssertionError(f"run script ended before {marker}: {lines}")
