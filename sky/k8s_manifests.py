"""Kubernetes manifests of a Deployment: a Deployment + Service per replica, or a LeaderWorkerSet.

Each replica of a plan is its own pod asking for `world_size` GPUs (`nvidia.com/gpu` limits; the
device plugin then sets CUDA_VISIBLE_DEVICES), with a memory-backed /dev/shm for NCCL, startup and
readiness probes on `GET /v1/models` (the startup probe allows the model's cold load time), a
liveness probe on `GET /health` (503 only for a dead engine), and the Hugging Face token read from
a Secret. A replica wider than one node becomes a LeaderWorkerSet: the leader starts a Ray head and
`vllm serve ... --worker-backend ray`, the workers join it. Rendering only: sky/kubernetes.py applies them.
"""

from __future__ import annotations

import math
import shlex
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from worldtune.sky.render import (
    PROBE_PATH,
    RenderOptions,
    ReplicaSlice,
    cold_load_s,
    serve_argv,
    server_envs,
    startup_allowance_s,
)
from worldtune.tools.words.deployment import API_KEY_ENV, Deployment
from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.models import get_model

GPU_RESOURCE = "nvidia.com/gpu"
MANAGED_BY = {"app.kubernetes.io/managed-by": "worldtune"}
DEPLOYMENT_LABEL = "worldtune.io/deployment"
REPLICA_LABEL = "worldtune.io/replica"
HF_SECRET_KEY = "HF_TOKEN"
RAY_PORT = 6379
HEALTH_PATH = "/health"  # vLLM-Omni: 200 {"status": "healthy"}, 503 when the engine is dead
LWS_API = ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets")


class K8sOptions(BaseModel):
    """Where and how the manifests run: namespace, image, node size, secret name, shared memory."""

    model_config = ConfigDict(extra="forbid")

    namespace: str = "default"
    image: str = Field(default="", description="server image; default: the pinned vLLM-Omni image")
    twin_image: str = Field(default="", description="an image with worldtune installed (engine twin)")
    gpus_per_node: int = Field(default=8, ge=1)
    hf_secret: str = Field(default="worldtune-hf-token", description="Secret holding key HF_TOKEN")
    shm_gib: int = Field(default=64, ge=1)
    port: int = Field(default=8000, ge=1024, le=65535)
    node_selector: dict[str, str] = Field(default_factory=dict)
    hf_cache_host_path: str = Field(
        default="", description="weights cache on the node's disk (hostPath), so a pod rolled on that node loads warm"
    )
    cold_load_s: float | None = Field(
        default=None,
        gt=0,
        description="the model's load from disk on the deployment's GPU type (the startup probe allows twice it); "
        "the deploy capability fills it from the calibrated profile (tools/deploy_preview.k8s_options)",
    )


def resource_name(deployment: Deployment, replica: int) -> str:
    """`worldtune-<id>-r<i>`: DNS-1035 (lowercase, starts with a letter), so it also names a Service."""
    return f"worldtune-{deployment.id}-r{replica}".lower().replace("_", "-")


def pod_labels(deployment: Deployment, replica: int) -> dict[str, str]:
    return {**MANAGED_BY, DEPLOYMENT_LABEL: deployment.id.lower(), REPLICA_LABEL: str(replica)}


def _container(deployment: Deployment, options: K8sOptions, argv: list[str], gpus: int) -> dict[str, Any]:
    image = _image(deployment, options)
    allowance = startup_allowance_s(deployment, cold_load_s(options.cold_load_s))
    # vLLM-Omni's /v1 routes need the API key; /health is outside the guard (and listens only once loaded)
    probe = {"httpGet": {"path": HEALTH_PATH if deployment.engine == "vllm-omni" else PROBE_PATH, "port": options.port}}
    health = {"httpGet": {"path": HEALTH_PATH, "port": options.port}}
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in server_envs(deployment).items()]
    if deployment.engine == "vllm-omni":
        ref = {"secretKeyRef": {"name": options.hf_secret, "key": HF_SECRET_KEY}}
        env.append({"name": HF_SECRET_KEY, "valueFrom": ref})
        key = {"secretKeyRef": {"name": api_key_secret(deployment), "key": API_KEY_ENV}}
        env.append({"name": API_KEY_ENV, "valueFrom": key})
    limits = {GPU_RESOURCE: str(gpus)} if deployment.engine == "vllm-omni" else {}
    return {
        "name": "server",
        "image": image,
        "command": argv,
        "env": env,
        "ports": [{"name": "http", "containerPort": options.port, "protocol": "TCP"}],
        "resources": {"limits": limits, "requests": dict(limits)},
        "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}, {"name": "hf-cache", "mountPath": "/root/.cache"}],
        # The startup probe covers the model load (vLLM-Omni refuses connections until it is loaded: each
        # refused probe is one failure); readiness and liveness take over once it passes. Liveness asks
        # /health, the one route that says 503 when the engine is dead (/v1/models stays 200 then).
        "startupProbe": {**probe, "periodSeconds": 10, "failureThreshold": math.ceil(allowance / 10)},
        "readinessProbe": {**probe, "periodSeconds": 10, "failureThreshold": 3, "timeoutSeconds": 5},
        "livenessProbe": {**health, "periodSeconds": 30, "failureThreshold": 5, "timeoutSeconds": 10},
    }


def _image(deployment: Deployment, options: K8sOptions) -> str:
    if deployment.engine == "twin":
        if not options.twin_image:
            raise InvalidInput(
                "twin_image", "", "an image with worldtune installed for engine twin on Kubernetes", "set --twin-image"
            )
        return options.twin_image
    return options.image or RenderOptions().image


def _pod_spec(deployment: Deployment, options: K8sOptions, containers: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": containers,
        "volumes": [
            {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{options.shm_gib}Gi"}},
            {"name": "hf-cache", "hostPath": {"path": options.hf_cache_host_path, "type": "DirectoryOrCreate"}}
            if options.hf_cache_host_path
            else {"name": "hf-cache", "emptyDir": {}},
        ],
        "terminationGracePeriodSeconds": 30,
    }
    if options.node_selector:
        spec["nodeSelector"] = dict(options.node_selector)
    return spec


def api_key_secret(deployment: Deployment) -> str:
    """The Secret that holds the deployment's API key (created through the API at launch, never written out)."""
    return f"worldtune-{deployment.id}-api-key".lower().replace("_", "-")


def _argv(deployment: Deployment, options: K8sOptions) -> list[str]:
    opts = RenderOptions(base_port=options.port, host="0.0.0.0", worldtune="worldtune")
    argv = serve_argv(deployment, ReplicaSlice(index=0, gpus=(), port=options.port), opts)
    if deployment.engine == "vllm-omni":  # the kubelet expands $(VAR) from the container's env (the Secret)
        argv += ["--api-key", f"$({API_KEY_ENV})"]
    return argv


def _service(deployment: Deployment, replica: int, options: K8sOptions, selector: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": resource_name(deployment, replica),
            "namespace": options.namespace,
            "labels": pod_labels(deployment, replica),
        },
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [{"name": "http", "port": options.port, "targetPort": options.port, "protocol": "TCP"}],
        },
    }


def _deployment(deployment: Deployment, replica: int, options: K8sOptions, world: int) -> dict[str, Any]:
    labels = pod_labels(deployment, replica)
    container = _container(deployment, options, _argv(deployment, options), world)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": resource_name(deployment, replica), "namespace": options.namespace, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            # GPUs are the scarce resource: never run old and new pods side by side.
            "strategy": {"type": "Recreate"},
            "template": {"metadata": {"labels": labels}, "spec": _pod_spec(deployment, options, [container])},
        },
    }


def _leader_worker_set(deployment: Deployment, replica: int, options: K8sOptions, nodes: int) -> dict[str, Any]:
    """One replica spanning `nodes` nodes: a Ray cluster per group, the server on the leader."""
    labels = pod_labels(deployment, replica)
    serve = shlex.join([*_argv(deployment, options), "--worker-backend", "ray"])
    leader_cmd = ["bash", "-c", f"ray start --head --port={RAY_PORT} && exec {serve}"]
    worker_cmd = ["bash", "-c", f"ray start --address=$(LWS_LEADER_ADDRESS):{RAY_PORT} --block"]
    per_node = options.gpus_per_node
    leader = _container(deployment, options, leader_cmd, per_node)
    worker = _container(deployment, options, worker_cmd, per_node)
    worker["name"] = "worker"
    worker["ports"] = []
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        worker.pop(probe)
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": resource_name(deployment, replica), "namespace": options.namespace, "labels": labels},
        "spec": {
            "replicas": 1,
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": {
                "size": nodes,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {
                    "metadata": {"labels": {**labels, "role": "leader"}},
                    "spec": _pod_spec(deployment, options, [leader]),
                },
                "workerTemplate": {
                    "metadata": {"labels": {**labels, "role": "worker"}},
                    "spec": _pod_spec(deployment, options, [worker]),
                },
            },
        },
    }


def render_manifests(deployment: Deployment, options: K8sOptions | None = None) -> list[dict[str, Any]]:
    """Every object the deployment needs, in apply order (workloads first, then their Services)."""
    opts = options or K8sOptions()
    plan = deployment.plan
    get_model(deployment.model)
    world = plan.world_size
    objects: list[dict[str, Any]] = []
    for replica in range(plan.replicas):
        if world > opts.gpus_per_node:
            if world % opts.gpus_per_node:
                per_node = f"a world size that is a multiple of {opts.gpus_per_node} GPUs per node"
                raise InvalidInput("plan", str(deployment.plan), per_node)
            objects.append(_leader_worker_set(deployment, replica, opts, world // opts.gpus_per_node))
            selector = {**pod_labels(deployment, replica), "role": "leader"}
        else:
            objects.append(_deployment(deployment, replica, opts, world))
            selector = pod_labels(deployment, replica)
        objects.append(_service(deployment, replica, opts, selector))
    return objects


def manifest_filename(obj: dict[str, Any]) -> str:
    """`<kind>-<name>.yaml`, lowercase, for writing manifests/ out."""
    return f"{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"


def service_url(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return f"http://{meta['name']}.{meta['namespace']}.svc.cluster.local:{obj['spec']['ports'][0]['port']}"
