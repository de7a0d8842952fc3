"""The servers of a deployment: how it is rendered (RenderOptions), one GPU slice and port per replica, and
each replica's server command and environment.

Every replica of a plan is its own server on its own GPU slice (CUDA_VISIBLE_DEVICES) and port:
vLLM-Omni runs one Cosmos 3 request at a time, so "N replicas on a node" means N separate servers
(REFERENCE.md section 2). With engine "vllm-omni" a replica runs `vllm serve <hf_id> --omni` with
exactly Plan.serve_flags(); with engine "twin" it runs `worldtune twin` under the same plan. Either
takes `--api-key "$WORLDTUNE_API_KEY"`, expanded by the shell at start. sky/render.py puts these
commands in a SkyPilot task's run script; sky/k8s_manifests.py in the containers of a pod.
"""

from __future__ import annotations

import shlex
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from worldtune.tools.words.deployment import API_KEY_ENV, Deployment
from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.models import get_model
from worldtune.tools.words.plan import Plan
from worldtune.tools.words.vllm_omni import PINNED

VLLM_OMNI_VERSION = PINNED.version  # tools/words/vllm_omni.py holds the pin and its flag spellings
# The release image of the version whose flags Plan.serve_flags() follows. The `cosmos3` tag is the
# release-tested Cosmos 3 image; it is mutable, so worldtune pins the versioned tag (override: --image).
VLLM_OMNI_IMAGE = PINNED.image
SUPER_INIT_TIMEOUT_S = 1800  # --init-timeout for 64B checkpoints (vLLM-Omni's default 600 s is too short cold)
# /v1/videos/sync counts queue time against this (default 600 s -> 504); several 100-400 s clips can queue.
VIDEO_SYNC_TIMEOUT_S = 7200
DEFAULT_PORT = 8000
DEFAULT_DISK_GB = 512  # Super's ~124 GB checkpoint, the image and the Hugging Face cache


class RenderOptions(BaseModel):
    """How to turn a deployment into a task: image or pip, ports, where `worldtune` is on the cluster."""

    model_config = ConfigDict(extra="forbid")

    install: Literal["docker", "pip", "host"] = Field(
        default="docker",
        description="vLLM-Omni from its image, a pinned pip install on the host, or already on the nodes (`host`: "
        "nothing is installed; `vllm` must be on the servers' PATH, e.g. through server_env)",
    )
    model_path: str | None = Field(
        default=None,
        description="serve this checkpoint folder, already on the nodes (a shared filesystem, an air-gapped cluster), "
        "instead of downloading the model's Hugging Face id; its layout is the Hugging Face one",
    )
    server_env: dict[str, str] = Field(
        default_factory=dict,
        description="more environment of every server (HF_HUB_OFFLINE=1, NCCL_* settings, PATH); not secrets",
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
        default=None,
        gt=0,
        description="seconds per request of one replica (SkyServe's target): measured, else the model's prediction, "
        "which the deploy capability fills in (tools/deploy_preview.render_options)",
    )
    cold_load_s: float | None = Field(
        default=None,
        gt=0,
        description="the model's load from disk on the deployment's GPU type (the start-up allowance is twice it); "
        "the deploy capability fills it from the calibrated profile (tools/deploy_preview.render_options)",
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
    plan = deployment.plan
    count = deployment.offer.gpu_count if deployment.offer else plan.gpus
    if count < plan.gpus:
        raise InvalidInput("plan", str(plan), f"at most {count} GPUs (the offer's node)", f"it uses {plan.gpus}")
    return count


def serve_argv(deployment: Deployment, replica: ReplicaSlice, options: RenderOptions) -> list[str]:
    """The server command of one replica (without the CUDA_VISIBLE_DEVICES prefix)."""
    plan = deployment.plan
    spec = get_model(deployment.model)
    if deployment.engine == "twin":
        argv = [*shlex.split(options.worldtune), "twin", "--port", str(replica.port), "--gpu", deployment.gpu]
        argv += ["--plan", str(plan.single_replica()), "--time-scale", f"{deployment.time_scale:g}"]
        argv += ["--seed", str(deployment.replica_seed(replica.index))]  # its own noise, as a separate node's
        if deployment.model != "cosmos3-super":
            argv += ["--model", deployment.model]
        if deployment.twin_profile:
            argv += ["--profile", deployment.twin_profile]
        # the twin sends stage durations only under the real flag's name, as vLLM-Omni does
        return [*argv, PINNED.stage_profiler, *PINNED.guardrail_flags(deployment.guardrails)]
    argv = [
        "vllm",
        "serve",
        options.model_path or spec.hf_id,
        "--omni",
        "--host",
        options.host,
        "--port",
        str(replica.port),
    ]
    argv += plan.single_replica().serve_flags(PINNED)
    if spec.total_params_b > 40:
        argv += [PINNED.init_timeout, str(SUPER_INIT_TIMEOUT_S)]
    if options.model_revision and not options.model_path:
        argv += ["--revision", options.model_revision]
    # stage durations (text encode, diffuse, VAE decode) in every answer: the evidence a result reports;
    # without the flag vLLM-Omni sends X-Stage-Durations: {} (worldtune's benchmark and search do not need them)
    argv.append(PINNED.stage_profiler)
    # the guardrails the deployment asks (its workload's); on, the model counts their start-up and per-clip time
    return [*argv, *PINNED.guardrail_flags(deployment.guardrails), *options.extra_serve_flags]


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
    return [serve_command(deployment, r, opts) for r in replica_slices(deployment.plan, opts.base_port)]


def server_envs(deployment: Deployment) -> dict[str, str]:
    """Environment of every server process: the raised sync timeout, allocator and download settings."""
    envs = {"VLLM_OMNI_VIDEO_SYNC_TIMEOUT": str(VIDEO_SYNC_TIMEOUT_S)}
    if deployment.engine == "vllm-omni":
        # Super on one H200 needs it for the 720p VAE decode; harmless on larger slices.
        envs["PYTORCH_ALLOC_CONF"] = "expandable_segments:True"
        envs["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    return envs
