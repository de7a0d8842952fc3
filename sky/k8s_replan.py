"""Kubernetes replan: roll a deployment's pods under a new plan on the node(s) they already run on.

What "keep the node, change the plan" means on Kubernetes, as manifests (render_replan) and as calls
(replan, used by KubernetesBackend.replan):

- the workloads keep their names (`worldtune-<id>-r<i>`) and are replaced in place; their pod template
  carries the new plan's server command and the annotations `worldtune.io/plan` and
  `worldtune.io/previous-plans`, so the change is a rollout, not a new deployment;
- `strategy: Recreate` (as at launch): the old pod stops before the new one asks for the GPUs, never both;
- a required node affinity on `kubernetes.io/hostname` pins the new pods to the nodes the old ones ran on
  (the same node pool, the same machines): with `hf_cache_host_path` set, the weights are on that node's
  disk and in its page cache, so the load is warm; without it (emptyDir) the weights leave with the old pod
  and the load is as cold as a first one, which `render_replan` says in its note;
- replicas the new plan no longer has (a plan with fewer replicas on the node) are deleted, with their
  Services; the Services of kept replicas stay (same selector, same DNS name);
- a LeaderWorkerSet (a replica wider than a node) is patched in place on the node pool; its group is
  recreated by its controller (no per-node pin: the leader's placement is the controller's).
The ledger row, owner and commitment stay the deployment's.
"""

from __future__ import annotations

import copy
import time
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from worldtune.sky.k8s_manifests import DEPLOYMENT_LABEL, K8sOptions, render_manifests
from worldtune.tools.words.deployment import Deployment, Progress, replan_target, replanned
from worldtune.tools.words.errors import InvalidInput

if TYPE_CHECKING:
    from worldtune.sky.kubernetes import KubernetesBackend

HOSTNAME_LABEL = "kubernetes.io/hostname"
PLAN_ANNOTATION = "worldtune.io/plan"
PREVIOUS_ANNOTATION = "worldtune.io/previous-plans"


class ReplanManifests(BaseModel):
    """The objects a replan applies (in order) and deletes, and whether the new pods load warm."""

    model_config = ConfigDict(extra="forbid")

    deployment: Deployment = Field(description="the deployment as it restarts under the new plan")
    apply: list[dict[str, Any]]
    delete: list[dict[str, Any]]
    nodes: list[str] = Field(default_factory=list, description="the nodes the new pods are pinned to")
    warm: bool = Field(description="true when the weights stay on the node (hf_cache_host_path set)")
    note: str = ""


def _pin(template: dict[str, Any], nodes: list[str], plan: str, previous: list[str]) -> None:
    meta = template.setdefault("metadata", {})
    notes = {PLAN_ANNOTATION: plan, PREVIOUS_ANNOTATION: ",".join(previous)}
    meta["annotations"] = {**meta.get("annotations", {}), **notes}
    if nodes:
        term = {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": sorted(nodes)}]}
        affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
        template["spec"]["affinity"] = affinity


def render_replan(
    deployment: Deployment, plan: str, options: K8sOptions | None = None, nodes: list[str] | None = None
) -> ReplanManifests:
    """The manifests that roll `deployment` onto `plan` on `nodes` (refused first if the plan outgrows the node)."""
    opts = options or K8sOptions()
    target = replanned(deployment, replan_target(deployment, plan))
    apply = [copy.deepcopy(o) for o in render_manifests(target, opts)]
    for obj in apply:
        if obj["kind"] == "Deployment":
            _pin(obj["spec"]["template"], list(nodes or []), str(target.plan), target.previous_plans)
        elif obj["kind"] == "LeaderWorkerSet":
            for key in ("leaderTemplate", "workerTemplate"):
                _pin(obj["spec"]["leaderWorkerTemplate"][key], [], str(target.plan), target.previous_plans)
    kept = {(o["kind"], o["metadata"]["name"]) for o in apply}
    stale = [o for o in render_manifests(deployment, opts) if (o["kind"], o["metadata"]["name"]) not in kept]
    warm = bool(opts.hf_cache_host_path)
    note = "" if warm else "hf-cache is an emptyDir: the weights leave with the old pods, so this load is cold"
    return ReplanManifests(
        deployment=target, apply=apply, delete=stale, nodes=sorted(nodes or []), warm=warm, note=note
    )


def _nodes(backend: KubernetesBackend, deployment: Deployment) -> list[str]:
    pods = backend.core.list_namespaced_pod(
        backend.options.namespace, label_selector=f"{DEPLOYMENT_LABEL}={deployment.id.lower()}"
    )
    return sorted({p.spec.node_name for p in getattr(pods, "items", []) if p.spec and p.spec.node_name})


def replan(backend: KubernetesBackend, deployment: Deployment, plan: str, progress: Progress | None) -> Deployment:
    """Apply the replan's manifests, delete the stale ones, wait until ready (TimeoutError: the caller tears down)."""
    from worldtune.sky.render import cold_load_s, startup_allowance_s

    cluster = deployment.cluster or f"k8s/{backend.options.namespace}/worldtune-{deployment.id}"
    if not backend.store.ledger_open(cluster):
        raise InvalidInput("deployment_id", deployment.id, "a deployment whose manifests are still applied", cluster)
    options = backend.options_for(deployment)  # the model's numbers filled in (same GPU type and model)
    rolled = render_replan(deployment, plan, options, _nodes(backend, deployment))
    backend.store.ledger_update(cluster, "replanning", f"{deployment.plan} -> {rolled.deployment.plan}")
    for obj in rolled.apply:
        backend.apply(obj)
        if progress:
            progress(f"rolled {obj['kind']} {obj['metadata']['name']} to {rolled.deployment.plan}", None)
    for obj in rolled.delete:
        backend.delete(obj)
    dep = rolled.deployment.model_copy(update={"cluster": cluster})
    deadline = time.time() + startup_allowance_s(dep, cold_load_s(options.cold_load_s)) + 600
    while True:
        dep = backend.status(dep.model_copy(update={"state": "loading"}))
        if dep.state == "ready" or time.time() > deadline:
            break
        if progress:
            progress(dep.detail, None)
        time.sleep(backend.poll_s)
    if dep.state != "ready":
        raise TimeoutError(f"{cluster} not ready under {rolled.deployment.plan} in time: {dep.detail}")
    backend.store.ledger_update(cluster, "ready")
    return dep.model_copy(
        update={"ready_at": time.time(), "endpoints": backend.endpoints(dep), "loads": deployment.loads + 1}
    )
