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
"""

from __future__ import annotations

import math
import shlex
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from worldtune.tools.deployment import API_KEY_ENV, Deployment
from worldtune.tools.errors import InvalidInput
from worldtune.tools.gpus import get_gpu
from worldtune.tools.models import get_model
from worldtune.tools.plan import Plan
from worldtune.tools.vllm_omni import PINNED

VLLM_OMNI_VERSION = PINNED.version  # tools/vllm_omni.py holds the pin and its flag spellings
# The release image of the version whose flags Plan.serve_flags() follows. The `cosmos3` tag is the
# release-tested Cosmos 3 image; it is mutable, so worldtune pins the versioned tag (override: --image).
VLLM_OMNI_IMAGE = PINNED.image
SUPER_INIT_TIMEOUT_S = 1800  # --init-timeout for 64B checkpoints (vLLM-Omni's default 600 s is too short cold)
# /v1/videos/sync counts queue time against this (default 600 s -> 504); several 100-400 s clips can queue.
VIDEO_SYNC_TIMEOUT_S = 7200
DEFAULT_PORT = 8000
DEFAULT_DISK_GB = 512  # Super's ~124 GB checkpoint, the image and the Hugging Face cache
HF_TOKEN = "HF_TOKEN"
READY_MARKER = "WORLDTUNE_READY"
ALL_READY_MARKER = "WORLDTUNE_ALL_READY"
FAILED_MARKER = "WORLDTUNE_FAILED"
LOG_DIR = "~/.worldtune/serve-logs"
PROBE_PATH = "/v1/models"


class RenderOptions(BaseModel):
    """How to turn a deployment into a task: image or pip, ports, where `worldtune` is on the cluster."""

    model_config = ConfigDict(extra="forbid")

    install: Literal["docker", "pip"] = Field(
        default="docker", description="vLLM-Omni from its image, or a pinned pip install on the host"
    )
    image: str = Field(default=VLLM_OMNI_IMAGE, description="docker image (install=docker)")
    base_port: int = Field(default=DEFAULT_PORT, ge=1024, le=65000, description="replica i listens on base+i")
    host: str = Field(default="0.0.0.0", description="bind address; 127.0.0.1 when only the cluster calls it")
    worldtune: str = Field(default="worldtune", description="command that runs worldtune on the cluster (twin)")
    twin_setup: str = Field(default="", description="setup commands that make `worldtune` available (twin)")
    disk_size_gb: int = Field(default=DEFAULT_DISK_GB, ge=50)
    spot_fallback: bool = Field(default=False, description="spot: let SkyPilot fall back to on-demand")
    model_revision: str | None = Field(default=None, description="Hugging Face revision to pin")
    open_ports: bool = Field(default=True, description="ask the cloud to open the replica ports")
    extra_serve_flags: tuple[str, ...] = ()
    ship_worldtune: bool = Field(
        default=False, description="sync this checkout as workdir and install it in ~/.worldtune-venv (bench jobs)"
    )
    service_time_s: float | None = Field(
        default=None, gt=0, description="measured seconds per request of one replica (SkyServe target); else predicted"
    )


class ReplicaSlice(BaseModel):
    """One server of a deployment: its index, GPUs on the node and port."""

    model_config = ConfigDict(frozen=True)

    index: int
    gpus: tuple[int, ...]
    port: int

    @property
    def cuda_visible_devices(self) -> str:
        return ",".join(str(g) for g in self.gpus)


def replica_slices(plan: Plan, base_port: int = DEFAULT_PORT) -> list[ReplicaSlice]:
    """Disjoint GPU slices and distinct ports, one per replica of the plan."""
    world = plan.world_size
    return [
        ReplicaSlice(index=i, gpus=tuple(range(i * world, (i + 1) * world)), port=base_port + i)
        for i in range(plan.replicas)
    ]


def node_gpus(deployment: Deployment) -> int:
    """GPUs to ask for on the node: the offer's shape, else what the plan uses."""
    plan = Plan.parse(deployment.plan)
    count = deployment.offer.gpu_count if deployment.offer else plan.gpus
    if count < plan.gpus:
        raise InvalidInput("plan", deployment.plan, f"at most {count} GPUs (the offer's node)", f"it uses {plan.gpus}")
    return count


def cold_load_s(deployment: Deployment) -> float:
    """The model's load from disk on the deployment's GPU type, as its calibrated profile predicts."""
    from worldtune.tools.estimate import resolve_profile

    return resolve_profile(deployment.gpu).load_time_s(get_model(deployment.model).weights_gib_bf16, cold=True)


def startup_allowance_s(deployment: Deployment) -> int:
    """Seconds a replica may take to answer /v1/models: twice the cold load time, at least 5 minutes.

    The twin loads in its profile's time divided by the time scale, so its allowance shrinks with it.
    """
    load = cold_load_s(deployment)
    if deployment.engine == "twin":
        return max(30, math.ceil(2 * load / deployment.time_scale))
    return max(300, math.ceil(2 * load))


def serve_argv(deployment: Deployment, replica: ReplicaSlice, options: RenderOptions) -> list[str]:
    """The server command of one replica (without the CUDA_VISIBLE_DEVICES prefix)."""
    plan = Plan.parse(deployment.plan)
    spec = get_model(deployment.model)
    if deployment.engine == "twin":
        argv = [*shlex.split(options.worldtune), "twin", "--port", str(replica.port), "--gpu", deployment.gpu]
        argv += ["--plan", str(plan.single_replica()), "--time-scale", f"{deployment.time_scale:g}"]
        if deployment.model != "cosmos3-super":
            argv += ["--model", deployment.model]
        if deployment.twin_profile:
            argv += ["--profile", deployment.twin_profile]
        # the twin sends stage durations only under the real flag's name, as vLLM-Omni does
        return [*argv, PINNED.stage_profiler]
    argv = ["vllm", "serve", spec.hf_id, "--omni", "--host", options.host, "--port", str(replica.port)]
    argv += plan.single_replica().serve_flags(PINNED)
    if spec.total_params_b > 40:
        argv += [PINNED.init_timeout, str(SUPER_INIT_TIMEOUT_S)]
    if options.model_revision:
        argv += ["--revision", options.model_revision]
    # stage durations (text encode, diffuse, VAE decode) in every answer: the evidence a result reports;
    # without the flag vLLM-Omni sends X-Stage-Durations: {} (worldtune's benchmark and search do not need them)
    argv.append(PINNED.stage_profiler)
    return [*argv, *options.extra_serve_flags]


def serve_command(deployment: Deployment, replica: ReplicaSlice, options: RenderOptions) -> str:
    """One replica's full shell command: its GPU slice, then the server.

    vLLM-Omni listens on the open port of a public node, so it takes an API key: the SkyPilot secret
    $WORLDTUNE_API_KEY, expanded by the shell at start (the rendered text carries only its name).
    """
    argv = serve_argv(deployment, replica, options)
    if deployment.engine == "twin":  # the worldtune command is the user's shell text (it may start with ~/)
        text = f"{options.worldtune} {shlex.join(argv[len(shlex.split(options.worldtune)) :])}"
    else:
        text = shlex.join(argv)
    # the twin stands in for the GPUs, not for the server's guard: it takes the key as vLLM-Omni does
    text = f'{text} --api-key "${API_KEY_ENV}"'
    return f"CUDA_VISIBLE_DEVICES={replica.cuda_visible_devices} {text}"


def serve_commands(deployment: Deployment, options: RenderOptions | None = None) -> list[str]:
    opts = options or RenderOptions()
    return [serve_command(deployment, r, opts) for r in replica_slices(Plan.parse(deployment.plan), opts.base_port)]


def server_envs(deployment: Deployment) -> dict[str, str]:
    """Environment of every server process: the raised sync timeout, allocator and download settings."""
    envs = {"VLLM_OMNI_VIDEO_SYNC_TIMEOUT": str(VIDEO_SYNC_TIMEOUT_S)}
    if deployment.engine == "vllm-omni":
        # Super on one H200 needs it for the 720p VAE decode; harmless on larger slices.
        envs["PYTORCH_ALLOC_CONF"] = "expandable_segments:True"
        envs["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    return envs


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
    if options.install == "pip":
        lines.append(f"python3 -m pip install --quiet 'vllm-omni=={VLLM_OMNI_VERSION}' huggingface_hub")
    lines += _worldtune_setup(options)
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
    plan = Plan.parse(deployment.plan)
    allowance = startup_allowance_s(deployment)
    lines = [
        "set -u",
        # the servers take the key from a SkyPilot secret: without it, say so before anything starts
        f'if [ -z "${{{API_KEY_ENV}:-}}" ]; then echo "{FAILED_MARKER} the API key is not set: launch with '
        f"--secret {API_KEY_ENV}=KEY (worldtune's own launch passes it)\"; exit 1; fi",
        f"logs={LOG_DIR}/$SKYPILOT_TASK_ID",
        'mkdir -p "$logs"',
        "pids=()",
        'cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; }',
        "trap cleanup EXIT",
        "trap 'exit 143' TERM INT",
    ]
    for replica in replica_slices(plan, options.base_port):
        lines.append(f'{serve_command(deployment, replica, options)} > "$logs/replica-{replica.index}.log" 2>&1 &')
        lines.append("pids+=($!)")
    # the probe sends the API key when the servers have one (an unauthenticated /v1/models answers 401)
    probe = (
        "python3 -c 'import os, sys, urllib.request as u; k = os.environ.get(sys.argv[2]); "
        'u.urlopen(u.Request(sys.argv[1], headers={"Authorization": "Bearer " + k} if k else {}), timeout=5)\' '
        f'"http://127.0.0.1:$port{PROBE_PATH}" {API_KEY_ENV} >/dev/null 2>&1'
    )
    ports = " ".join(str(r.port) for r in replica_slices(plan, options.base_port))
    lines += [
        f"deadline=$((SECONDS + {allowance}))",
        "i=0",
        f"for port in {ports}; do",
        f"  until {probe}; do",
        '    if ! kill -0 "${pids[$i]}" 2>/dev/null; then',
        f'      echo "{FAILED_MARKER} replica=$i port=$port exited before ready"; tail -n 40 "$logs/replica-$i.log"',
        "      exit 1",
        "    fi",
        f'    if [ "$SECONDS" -gt "$deadline" ]; then echo "{FAILED_MARKER} replica=$i port=$port not ready '
        f'in {allowance} s"; exit 1; fi',
        "    sleep 1",
        "  done",
        f'  echo "{READY_MARKER} replica=$i port=$port after=${{SECONDS}}s"',
        "  i=$((i + 1))",
        "done",
        f'echo "{ALL_READY_MARKER}"',
        'wait -n "${pids[@]}"',
        "rc=$?",
        f'echo "{FAILED_MARKER} a replica exited (status $rc)"',
        'exit "$rc"',
    ]
    return "\n".join(lines) + "\n"


def _resources(deployment: Deployment, options: RenderOptions, accelerators: str) -> dict[str, Any]:
    plan = Plan.parse(deployment.plan)
    res: dict[str, Any] = {"infra": deployment.infra, "accelerators": accelerators}
    if deployment.engine == "vllm-omni":
        res["disk_size"] = options.disk_size_gb
        if options.install == "docker":
            res["image_id"] = f"docker:{options.image}"
    if options.open_ports and not deployment.infra.startswith("slurm/"):
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
    if deployment.infra == "local":  # kubernetes is SkyPilot's too: the task runs on your cluster's pods
        raise InvalidInput(
            "infra", deployment.infra, "a SkyPilot infra: slurm/NAME, kubernetes or a cloud (nebius, lambda, ...)"
        )
    if deployment.capacity == "serverless":
        return render_service(deployment, opts)
    task: dict[str, Any] = {
        "name": cluster_name(deployment),
        "resources": _resources(deployment, opts, f"{get_gpu(deployment.gpu).sky_accelerator}:{node_gpus(deployment)}"),
        "envs": server_envs(deployment),
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
    plan = Plan.parse(deployment.plan)
    single = deployment.model_copy(update={"plan": str(plan.single_replica()), "offer": None})
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
                "initial_delay_seconds": startup_allowance_s(deployment),
                "timeout_seconds": 15,
            },
            "replica_policy": {
                "min_replicas": 0,
                "max_replicas": plan.replicas,
                # One server answers one request at a time, so it saturates at 1 / service time: aim there.
                "target_qps_per_replica": target_qps_per_replica(deployment, opts.service_time_s),
                "upscale_delay_seconds": 30,
                "downscale_delay_seconds": 900,
            },
            "ports": opts.base_port,
        },
        "resources": resources,
        "envs": server_envs(deployment),
        "setup": _setup(single, service_opts),
        "run": _run(single, service_opts),
    }
    if service_opts.ship_worldtune and (checkout := shipped_checkout()) is not None:
        task["workdir"] = str(checkout)  # the setup installs worldtune from it, as in render_task
    task["secrets"] = _secret_names(deployment)
    return task


def service_time_s(deployment: Deployment, measured_s: float | None = None) -> float:
    """Seconds one replica spends per request on the anchor workload: measured when given, else predicted."""
    if measured_s is not None:
        return measured_s
    from worldtune.tools.estimate import estimate_plan, resolve_profile
    from worldtune.tools.workload import anchor_workload

    plan = Plan.parse(deployment.plan).single_replica()
    found = estimate_plan(anchor_workload(deployment.model), deployment.gpu, plan, resolve_profile(deployment.gpu))
    if not found.valid or not found.latency_s:
        raise InvalidInput(
            "plan", deployment.plan, f"a plan with a predicted latency on {deployment.gpu}", found.reason
        )
    return float(found.latency_s)


def target_qps_per_replica(deployment: Deployment, measured_s: float | None = None) -> float:
    """SkyServe's per-replica target: what one server sustains (1 / service time), so a queue adds a replica.

    A fixed 0.01 (36 requests/hour) against a replica that serves 4.4 clips/hour only scales at ~8x overload.
    """
    return float(f"{1.0 / service_time_s(deployment, measured_s):.3g}")


def cold_start_s(deployment: Deployment) -> float:
    """What the first request after scale-to-zero waits: provisioning plus a cold model load."""
    provision = deployment.offer.provision_s if deployment.offer else 300.0
    return provision + cold_load_s(deployment)


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
