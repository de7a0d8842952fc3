"""Every command line worldtune renders for the real engine, parsed and checked by the real vLLM-Omni 0.30.0.

Rendered through the code a launch uses (sky/render.py's task and service, sky/k8s_manifests.py's pods, with
sky/backend.py's render options), for every valid plan of every model on H200 and B200 (replicas, FP8 and every
attention backend a plan may name), on a cloud, as a serverless service and on Kubernetes, with the `--install
pip` setup and guardrails on and off. Each replica's `vllm serve` goes through vLLM-Omni's own parser, its
`OmniServeCommand.validate` and the diffusion parallel config the engine builds from the parsed flags, whose world
size must equal the GPUs the replica is given (tests/real_engine/parse_commands.py, under the engine's Python).

What this cannot show: that the flags work on GPUs (kernels, memory), or that Cosmos3's real checkpoint loads.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from real_engine import ROOT, run_engine_script

from worldtune.sky import render
from worldtune.sky.backend import render_options_for
from worldtune.sky.k8s_manifests import GPU_RESOURCE, render_manifests
from worldtune.tools.deployments.preview import build_deployment, k8s_options, render_options
from worldtune.tools.plans.estimate import list_plans, validate
from worldtune.tools.words.deployment import API_KEY_ENV, Deployment
from worldtune.tools.words.models import MODELS
from worldtune.tools.words.plan import Plan

pytestmark = pytest.mark.integration

GPUS = ("H200", "B200")
BACKENDS = ("fa", "cudnn", "fi")
KEY = "parser-test-key"
SERVE_LINE = re.compile(
    r"^(CUDA_VISIBLE_DEVICES=(?P<devices>\S+) )?(?P<cmd>.*vllm serve .*?)(?: > \"\$logs/[^\"]+\" 2>&1 &)?$"
)


def valid_plans(model: str, gpu: str) -> list[str]:
    """Every plan vLLM-Omni and memory allow on 1-8 GPUs of one node, and its attention-backend variants."""
    found: list[str] = []
    for gpus in range(1, 9):
        for est in list_plans(model=model, gpu=gpu, gpus=gpus, include_invalid=False):
            plan = str(est.plan)
            found.append(plan)
            for backend in BACKENDS:
                variant = f"{plan}-{backend}"
                if validate(variant, model=model, gpu=gpu, node_gpus=gpus).valid:
                    found.append(variant)
    return found


def task_commands(script: str) -> list[tuple[list[str], int]]:
    """The `vllm serve` lines of a rendered run script, each with the GPUs its CUDA_VISIBLE_DEVICES gives it."""
    found = []
    for line in script.splitlines():
        matched = SERVE_LINE.match(line.strip())
        if not matched or "vllm serve" not in line:
            continue
        argv = shlex.split(matched["cmd"].replace(f"${API_KEY_ENV}", KEY))
        devices = matched["devices"]
        found.append((argv, len(devices.split(",")) if devices else 1))
    return found


def pod_commands(deployment: Deployment) -> list[tuple[list[str], int]]:
    found = []
    for obj in render_manifests(deployment, k8s_options(deployment)):
        if obj["kind"] != "Deployment":
            continue
        for container in obj["spec"]["template"]["spec"]["containers"]:
            argv = [KEY if a == f"$({API_KEY_ENV})" else a for a in container["command"]]
            found.append((argv, int(container["resources"]["limits"][GPU_RESOURCE])))
    return found


def rendered() -> tuple[list[dict[str, Any]], int]:
    """The distinct command lines (replicas that differ only in their port are parsed once), and how many were
    rendered in all."""
    items: list[dict[str, Any]] = []
    seen: set[tuple[str, ...]] = set()
    total = 0

    def add(label: str, commands: list[tuple[list[str], int]]) -> None:
        nonlocal total
        assert commands, f"{label}: no `vllm serve` line rendered"
        total += len(commands)
        for i, (argv, world) in enumerate(commands):
            port = argv.index("--port") + 1
            key = (*argv[:port], *argv[port + 1 :], str(world))  # replicas differ only in their port: parse one
            if key not in seen:
                seen.add(key)
                items.append({"id": f"{label} #{i}", "argv": argv, "world_size": world})

    for model in MODELS:
        for gpu in GPUS:
            plans = valid_plans(model, gpu)
            for plan in plans:
                cloud = build_deployment(gpu, plan, model=model, infra="nebius", engine="vllm-omni")
                task = render.render_task(cloud, render_options(cloud, render_options_for(cloud)))
                add(f"{model} {gpu} {plan} task", task_commands(task["run"]))
                if Plan.parse(plan).replicas == 1:  # a pod per replica: one replica's plan says it all
                    kube = build_deployment(gpu, plan, model=model, infra="kubernetes", engine="vllm-omni")
                    add(f"{model} {gpu} {plan} kubernetes", pod_commands(kube))
            # per model and GPU: serverless, pip install and guardrails on, with the last valid plan
            plan = plans[-1]
            service = build_deployment(
                gpu, plan, model=model, infra="nebius", engine="vllm-omni", capacity="serverless"
            )
            spec = render.render_service(service, render_options(service, render_options_for(service)))
            add(f"{model} {gpu} {plan} serverless", task_commands(spec["run"]))
            guarded = build_deployment(gpu, plan, model=model, infra="nebius", engine="vllm-omni", guardrails=True)
            opts = render_options(guarded, render_options_for(guarded)).model_copy(update={"install": "pip"})
            task = render.render_task(guarded, opts)
            add(f"{model} {gpu} {plan} pip+guardrails", task_commands(task["run"]))
    return items, total


def test_the_real_engine_accepts_every_rendered_command(tmp_path: Path) -> None:
    items, total = rendered()
    ids = [it["id"] for it in items]
    # the check can fail: a flag vLLM-Omni does not know, and a world size that is not the replica's GPUs
    bad_flag = {"id": "control: unknown flag", "argv": [*items[0]["argv"], "--not-a-vllm-flag"], "world_size": 1}
    bad_world = {"id": "control: world size", "argv": items[0]["argv"], "world_size": 3}
    bad_flag["world_size"] = items[0]["world_size"]
    verdicts = run_engine_script("parse_commands.py", [*items, bad_flag, bad_world], timeout=900)
    by_id = {v["id"]: v for v in verdicts}
    assert not by_id["control: unknown flag"]["ok"] and "--not-a-vllm-flag" in by_id["control: unknown flag"]["error"]
    assert not by_id["control: world size"]["ok"] and "world size" in by_id["control: world size"]["error"]
    refused = [f"{i}: {by_id[i]['error']}" for i in ids if not by_id[i]["ok"]]
    flags = sorted({a for it in items for a in it["argv"] if a.startswith("--")})
    summary = {"rendered": total, "distinct": len(items), "refused": len(refused), "flags": flags}
    (ROOT / ".cache").mkdir(exist_ok=True)
    (ROOT / ".cache" / "real-engine-parse.json").write_text(json.dumps(summary, indent=1))
    assert not refused, f"{len(refused)} of {len(items)} rendered commands refused by vLLM-Omni 0.30.0:\n" + "\n".join(
        refused[:20]
    )
    # what the commands exercise: every plan dimension's flag, the guardrails both ways, the key
    for flag in ("--tensor-parallel-size", "--ulysses-degree", "--ring-degree", "--cfg-parallel-size", "--use-hsdp",
                 "--hsdp-shard-size", "--vae-patch-parallel-size", "--diffusion-quantization-config",
                 "--diffusion-attention-backend", "--no-guardrails", "--api-key", "--init-timeout"):  # fmt: skip
        assert flag in flags, flag
    assert any("--no-guardrails" not in it["argv"] for it in items)  # guardrails on: the flag left out


def test_the_engine_under_test_is_the_release_worldtune_pins() -> None:
    """The venv the real-engine tests run (scripts/engine-setup.sh) holds exactly what `--install pip` renders
    (PINNED.pip_requirements): the parser, the server and the Slurm deploy here test that install's `vllm serve`."""
    import subprocess

    from real_engine import engine_env, engine_python

    from worldtune.tools.words.vllm_omni import PINNED

    names = "('vllm-omni', 'vllm', 'torch')"
    script = f"import importlib.metadata as m; print(' '.join(f'{{n}}=={{m.version(n)}}' for n in {names}))"
    done = subprocess.run([str(engine_python()), "-c", script], capture_output=True, text=True, env=engine_env(),
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == PINNED.pip_requirements()
