"""Renders a Deployment into a SkyPilot task (or a SkyServe service): resources, setup, one server per replica.

Every replica of a plan is its own server on its own GPU slice (CUDA_VISIBLE_DEVICES) and port:
vLLM-Omni runs one Cosmos 3 request at a time, so "N replicas on a node" means N separate servers
(REFERENCE.md section 2). With engine "vllm-omni" a replica runs `vllm serve <hf_id> --omni` with
exactly Plan.serve_flags(); with engine "twin" it runs `worldtune twin` under the same plan, so the
whole path runs for real on CPU-only clusters. The task's run script starts the replicas, waits for
`GET /v1/models` on each within a start-up allowance from the performance model's load time, prints
one marker line per ready replica (the backend watches the job log for them), and exits when any
replica dies, so a crashed server shows as a failed job.

The Hugging Face token is passed as a SkyPilot secret named HF_TOKEN whose value is filled in at
launch from the caller's environment: rendered files carry only the name, and nothing prints it.
vLLM-Omni serves on an open port, so it runs with `--api-key "$WORLDTUNE_API_KEY"`, another secret the
backend fills at launch ($WORLDTUNE_API_KEY, else a generated key); readiness checks and worldtune's
benchmark send it as a bearer token.

The servers themselves (the options, GPU slices and ports, each replica's command and environment) are
sky/replicas.py and the run script with its marker lines sky/run_script.py; this module puts them in a task
or a service, with the setup script, the resources, the secrets and the model's start-up allowance.
"""

from __future__ import annotations

import math
import shlex
from pathlib import Path
from typing import Any

import yaml

from worldtune.sky.replicas import (
    DEFAULT_DISK_GB,
    DEFAULT_PORT,
    SUPER_INIT_TIMEOUT_S,
    VIDEO_SYNC_TIMEOUT_S,
    VLLM_OMNI_IMAGE,
    VLLM_OMNI_VERSION,
    RenderOptions,
    ReplicaSlice,
    node_gpus,
    replica_slices,
    serve_argv,
    serve_command,
    serve_commands,
    server_envs,
)
from worldtune.sky.run_script import ALL_READY_MARKER, FAILED_MARKER, LOG_DIR, PROBE_PATH, READY_MARKER, run_script
from worldtune.tools.words.deployment import API_KEY_ENV, Deployment
from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.gpus import get_gpu
from worldtune.tools.words.models import get_model
from worldtune.tools.words.vllm_omni import PINNED

__all__ = [
    "ALL_READY_MARKER",
    "CLUSTER_VENV",
    "DEFAULT_DISK_GB",
    "DEFAULT_PORT",
    "FAILED_MARKER",
    "HF_TOKEN",
    "LOG_DIR",
    "PROBE_PATH",
    "READY_MARKER",
    "REPO_ROOT",
    "SUPER_INIT_TIMEOUT_S",
    "VIDEO_SYNC_TIMEOUT_S",
    "VLLM_OMNI_IMAGE",
    "VLLM_OMNI_VERSION",
    "RenderOptions",
    "ReplicaSlice",
    "cluster_name",
    "cold_load_s",
    "cold_start_s",
    "node_gpus",
    "render_service",
    "render_task",
    "replica_slices",
    "serve_argv",
    "serve_command",
    "serve_commands",
    "server_envs",
    "service_time_s",
    "shipped_checkout",
    "startup_allowance_s",
    "target_qps_per_replica",
    "to_yaml",
]

HF_TOKEN = "HF_TOKEN"


def cold_load_s(given: float | None) -> float:
    """The model's load from disk on the deployment's GPU type (RenderOptions.cold_load_s, K8sOptions.cold_load_s):
    the deploy capability predicts it from the calibrated profile (tools/deployments/preview.py); rendering refuses
    without it."""
    if given is None:
        raise InvalidInput(
            "cold_load_s",
            None,
            "the model's predicted cold load in seconds",
            "render through tools/deploy_preview.render_options, which fills it from the calibrated profile",
        )
    return given


def startup_allowance_s(deployment: Deployment, cold_load: float) -> int:
    """Seconds a replica may take to answer /v1/models: twice the cold load time `cold_load`, at least 5 minutes.

    The twin loads in its profile's time divided by the time scale, so its allowance shrinks with it.
    """
    if deployment.engine == "twin":
        return max(30, math.ceil(2 * cold_load / deployment.time_scale))
    return max(300, math.ceil(2 * cold_load))


REPO_ROOT = Path(__file__).resolve().parent.parent
CLUSTER_VENV = "~/.worldtune-venv"


def shipped_checkout() -> Path | None:
    """This checkout, when worldtune runs from one (it then travels as the task's workdir); None from a wheel."""
    return REPO_ROOT if (REPO_ROOT / "pyproject.toml").is_file() else None


def _worldtune_setup(options: RenderOptions) -> list[str]:
    """Install worldtune into its own venv, apart from the server's Python: from the synced workdir when this is a
    checkout, else the released package of this version (a task rendered from a wheel install has no workdir,
    and `pip install .` in an empty folder fails the setup under `set -e`)."""
    if not options.ship_worldtune:
        return [options.twin_setup] if options.twin_setup else []
    from worldtune import __version__

    source = "." if shipped_checkout() is not None else shlex.quote(f"worldtune=={__version__}")
    return [f"python3 -m venv {CLUSTER_VENV} && {CLUSTER_VENV}/bin/pip install --quiet {source}"]


def _setup(deployment: Deployment, options: RenderOptions) -> str:
    if deployment.engine == "twin":
        return "\n".join(["set -euo pipefail", *_worldtune_setup(options)]) + "\n"
    spec = get_model(deployment.model)
    revision = f', revision="{options.model_revision}"' if options.model_revision else ""
    lines = ["set -euo pipefail"]
    if options.model_path:  # the checkpoint is on the nodes: say so early if it is not
        lines.append(f"test -f {shlex.quote(options.model_path)}/model_index.json")
    if options.install == "pip":
        # vllm-omni alone has no `vllm serve`: vLLM itself and the torch it pins come with it (tools/words/vllm_omni.py)
        pins = " ".join(shlex.quote(p) for p in [*PINNED.pip_requirements(), "huggingface_hub"])
        lines.append(f"python3 -m pip install --quiet {pins}")
    lines += _worldtune_setup(options)
    if options.model_path:
        return "\n".join(lines) + "\n"
    # huggingface_hub reads HF_TOKEN from the environment (a SkyPilot secret); the token is never echoed.
    lines.append(
        "python3 -c "
        + shlex.quote(
            f'from huggingface_hub import snapshot_download; print(snapshot_download("{spec.hf_id}"{revision}))'
        )
    )
    return "\n".join(lines) + "\n"


def _run(deployment: Deployment, options: RenderOptions) -> str:
    """Start every replica, wait for /v1/models on each, report, then exit when any replica exits."""
    return run_script(deployment, options, startup_allowance_s(deployment, cold_load_s(options.cold_load_s)))


def _resources(deployment: Deployment, options: RenderOptions, accelerators: str) -> dict[str, Any]:
    plan = deployment.plan
    res: dict[str, Any] = {"infra": str(deployment.infra), "accelerators": accelerators}
    if deployment.engine == "vllm-omni":
        res["disk_size"] = options.disk_size_gb
        if options.install == "docker":
            res["image_id"] = f"docker:{options.image}"
    if options.open_ports and deployment.infra.kind != "slurm":
        ports = [r.port for r in replica_slices(plan, options.base_port)]
        res["ports"] = [str(ports[0]) if len(ports) == 1 else f"{ports[0]}-{ports[-1]}"]
    if deployment.capacity == "spot":
        if options.spot_fallback:
            # SkyPilot tries the cheapest first (spot) and fails over to on-demand capacity.
            res["any_of"] = [{"use_spot": True}, {"use_spot": False}]
        else:
            res["use_spot"] = True
    return res


def _secret_names(deployment: Deployment) -> dict[str, None]:
    """The task's secrets, named without values (`sky launch --secret NAME=value`; sky/backend.with_secrets)."""
    return {HF_TOKEN: None, API_KEY_ENV: None} if deployment.engine == "vllm-omni" else {API_KEY_ENV: None}


def render_task(deployment: Deployment, options: RenderOptions | None = None) -> dict[str, Any]:
    """The SkyPilot task (YAML as a dict) that runs every replica of the deployment on one node."""
    opts = options or RenderOptions()
    if deployment.infra.is_local:  # kubernetes is SkyPilot's too: the task runs on your cluster's pods
        raise InvalidInput(
            "infra", str(deployment.infra), "a SkyPilot infra: slurm/NAME, kubernetes or a cloud (nebius, lambda, ...)"
        )
    if deployment.capacity == "serverless":
        return render_service(deployment, opts)
    task: dict[str, Any] = {
        "name": cluster_name(deployment),
        "resources": _resources(deployment, opts, f"{get_gpu(deployment.gpu).sky_accelerator}:{node_gpus(deployment)}"),
        "envs": {**server_envs(deployment), **opts.server_env},
        "setup": _setup(deployment, opts),
        "run": _run(deployment, opts),
    }
    if opts.ship_worldtune and (checkout := shipped_checkout()) is not None:
        task["workdir"] = str(checkout)
    task["secrets"] = _secret_names(deployment)
    return task


def render_service(deployment: Deployment, options: RenderOptions | None = None) -> dict[str, Any]:
    """Serverless: a SkyServe service that scales to zero; one SkyServe replica = one server on its own node.

    SkyServe balances across nodes on one port, so a plan's replicas become service replicas of
    `world_size` GPUs each (8x1gpu -> up to 8 one-GPU nodes). The readiness probe's initial delay is
    the start-up allowance, and a request that finds zero replicas waits a cold start (provisioning
    plus model load): `cold_start_s` says how long.
    """
    opts = options or RenderOptions()
    plan = deployment.plan
    single = deployment.model_copy(update={"plan": plan.single_replica(), "offer": None})
    # SkyServe replicas take no `sky exec` bench jobs, so only a twin (which is worldtune) needs worldtune there
    service_opts = opts.model_copy(
        update={
            "host": "0.0.0.0",
            "open_ports": True,
            "ship_worldtune": opts.ship_worldtune and deployment.engine == "twin",
        }
    )
    accelerators = f"{get_gpu(deployment.gpu).sky_accelerator}:{plan.world_size}"
    resources = _resources(single.model_copy(update={"capacity": "on-demand"}), service_opts, accelerators)
    task: dict[str, Any] = {
        "name": cluster_name(deployment),
        "service": {
            "readiness_probe": {
                # vLLM's /health is outside --api-key's guard; while loading the port refuses connections
                "path": "/health" if deployment.engine == "vllm-omni" else PROBE_PATH,
                "initial_delay_seconds": startup_allowance_s(deployment, cold_load_s(opts.cold_load_s)),
                "timeout_seconds": 15,
            },
            "replica_policy": {
                "min_replicas": 0,
                "max_replicas": plan.replicas,
                # One server answers one request at a time, so it saturates at 1 / service time: aim there.
                "target_qps_per_replica": target_qps_per_replica(deployment, opts),
                "upscale_delay_seconds": 30,
                "downscale_delay_seconds": 900,
            },
            "ports": opts.base_port,
        },
        "resources": resources,
        "envs": {**server_envs(deployment), **service_opts.server_env},
        "setup": _setup(single, service_opts),
        "run": _run(single, service_opts),
    }
    if service_opts.ship_worldtune and (checkout := shipped_checkout()) is not None:
        task["workdir"] = str(checkout)  # the setup installs worldtune from it, as in render_task
    task["secrets"] = _secret_names(deployment)
    return task


def service_time_s(deployment: Deployment, options: RenderOptions) -> float:
    """Seconds one replica spends per request on the anchor workload (RenderOptions.service_time_s): measured, else
    the model's prediction, which the deploy capability fills in (tools/deploy_preview.render_options)."""
    if options.service_time_s is None:
        raise InvalidInput(
            "service_time_s",
            None,
            f"one replica's seconds per request of {deployment.plan} (measured or predicted)",
            "render through tools/deploy_preview.render_options, which predicts it",
        )
    return options.service_time_s


def target_qps_per_replica(deployment: Deployment, options: RenderOptions) -> float:
    """SkyServe's per-replica target: what one server sustains (1 / service time), so a queue adds a replica.

    A fixed 0.01 (36 requests/hour) against a replica that serves 4.4 clips/hour only scales at ~8x overload.
    """
    return float(f"{1.0 / service_time_s(deployment, options):.3g}")


def cold_start_s(deployment: Deployment, cold_load: float) -> float:
    """What the first request after scale-to-zero waits: provisioning plus a cold model load (`cold_load`)."""
    provision = deployment.offer.provision_s if deployment.offer else 300.0
    return provision + cold_load


def cluster_name(deployment: Deployment) -> str:
    """`worldtune-<deployment id>`: names say whose they are (SkyPilot allows lowercase, digits and '-')."""
    return f"worldtune-{deployment.id}".lower().replace("_", "-")


def to_yaml(config: dict[str, Any]) -> str:
    """A task dict as YAML, multi-line scripts as literal blocks."""

    class _Dumper(yaml.SafeDumper):
        pass

    def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    _Dumper.add_representer(str, _str)
    return yaml.dump(config, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1000)
