"""What the real engine's first contact found in the rendered servers (issue 55 items 2, 3 and 6), each held here."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from worldtune.sky import render
from worldtune.sky.preview import write_preview
from worldtune.tools.deployments.preview import build_deployment, deployment_cold_load_s, preview, render_options
from worldtune.tools.plans.estimate import resolve_profile
from worldtune.tools.words.vllm_omni import PINNED

ROOT = Path(__file__).resolve().parents[3]


def test_pip_install_brings_vllm_and_the_torch_it_pins() -> None:
    """vllm-omni declares no dependency on vllm, yet `vllm serve --omni` is the server: a bare host needs both."""
    dep = build_deployment("H200", "cfg2-u4-hsdp8", infra="nebius")
    setup = render.render_task(dep, render_options(dep).model_copy(update={"install": "pip"}))["setup"]
    (line,) = [x for x in setup.splitlines() if "pip install" in x and "vllm" in x]
    assert PINNED.pip_requirements() == ["vllm-omni==0.30.0", "vllm==0.30.0", "torch==2.13.0"]
    for pin in PINNED.pip_requirements():
        assert pin in line.split(), line
    # the real-engine tests' venv (scripts/engine-setup.sh) installs these very pins, so `vllm serve` is tested there
    locked = (ROOT / "scripts" / "engine-requirements.txt").read_text().splitlines()
    assert set(PINNED.pip_requirements()) <= set(locked)


def test_the_kubernetes_serve_commands_run_under_sh_with_the_key(tmp_path: Path) -> None:
    """serve-commands.sh starts `#!/bin/sh`: the kubelet's `$(WORLDTUNE_API_KEY)` there ran a command of that name."""
    dep = build_deployment("H200", "2xtp4", infra="kubernetes")
    files = write_preview(preview(dep), tmp_path / "out")
    script = next(f for f in files if f.name == "serve-commands.sh")
    shims = tmp_path / "bin"
    shims.mkdir()
    seen = tmp_path / "argv.txt"
    vllm = shims / "vllm"
    vllm.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> {seen}\n')  # SHIM: records what the server would be given
    vllm.chmod(vllm.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{shims}:{os.environ['PATH']}", "WORLDTUNE_API_KEY": "k-123 with space"}
    done = subprocess.run(["/bin/sh", str(script)], capture_output=True, text=True, env=env, timeout=30)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    lines = seen.read_text().splitlines()
    assert len(lines) == 2 and all(line.endswith("--api-key k-123 with space") for line in lines)
    assert all(line.startswith("serve nvidia/Cosmos3-Super --omni") for line in lines)


@pytest.mark.parametrize("engine", ["vllm-omni", "twin"])
def test_the_deployments_guardrails_reach_the_servers_flag(engine: str) -> None:
    """vLLM-Omni runs Cosmos3's guardrails unless started with --no-guardrails; the workload and the model assume them
    off unless the goal asks: the deployment says which, and its command follows."""
    off = build_deployment("H200", "2xtp4", infra="nebius", engine=engine)
    on = build_deployment("H200", "2xtp4", infra="nebius", engine=engine, guardrails=True)
    assert all(" --no-guardrails " in c for c in render.serve_commands(off))
    assert not any("--no-guardrails" in c for c in render.serve_commands(on))
    # the start-up allowance counts the guard model's load when the server runs it
    guard = resolve_profile("H200").guardrail_startup_s
    assert deployment_cold_load_s(on) == pytest.approx(deployment_cold_load_s(off) + guard) and guard > 0


def test_a_checkpoint_already_on_the_nodes_is_served_without_a_download() -> None:
    """--install host --model-path DIR --server-env K=V: vLLM-Omni already on the nodes, the checkpoint too (the
    real-engine Slurm test serves the tiny Cosmos3 checkpoint this way)."""
    dep = build_deployment("H200", "cfg2", model="cosmos3-nano", infra="slurm/c")
    opts = render_options(dep).model_copy(
        update={"install": "host", "model_path": "/data/ckpt", "server_env": {"HF_HUB_OFFLINE": "1"}}
    )
    task = render.render_task(dep, opts)
    (command,) = render.serve_commands(dep, opts)
    assert " vllm serve /data/ckpt --omni " in command and "nvidia/" not in command
    assert "snapshot_download" not in task["setup"] and "pip install" not in task["setup"]
    assert "test -f /data/ckpt/model_index.json" in task["setup"]
    assert "image_id" not in task["resources"] and task["envs"]["HF_HUB_OFFLINE"] == "1"


def test_server_env_takes_pairs_and_refuses_secrets_by_name() -> None:
    from worldtune.cli_deploy import server_environment
    from worldtune.tools.words.errors import InvalidInput

    assert server_environment(["A=1", "PATH=/x:/y", "B=c=d"]) == {"A": "1", "PATH": "/x:/y", "B": "c=d"}
    for bad, named in (("WORLDTUNE_API_KEY=s3cret", "WORLDTUNE_API_KEY"), ("HF_TOKEN=hf_x", "HF_TOKEN"),
                       ("no-equals-sign", "(no =)"), ("1X=2", "1X")):  # fmt: skip
        with pytest.raises(InvalidInput) as refused:
            server_environment([bad])
        assert named in str(refused.value) and "s3cret" not in str(refused.value) and "hf_x" not in str(refused.value)
