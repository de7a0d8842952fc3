"""Kubernetes: the backend that applies a Deployment's manifests (sky/k8s_manifests.py) with the official
`kubernetes` client, watches them come up, rolls them under a new plan (sky/k8s_replan.py) and deletes them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from worldtune.sky import k8s_replan
from worldtune.sky.k8s_manifests import (
    HF_SECRET_KEY,
    LWS_API,
    MANAGED_BY,
    K8sOptions,
    api_key_secret,
    pod_labels,
    render_manifests,
    service_url,
)
from worldtune.sky.render import cold_load_s, startup_allowance_s
from worldtune.tools.words.deployment import API_KEY_ENV, BenchmarksFromHere, Deployment, Progress, Records


class KubernetesBackend(BenchmarksFromHere):
    """Applies a deployment's manifests to a cluster and deletes them, recording each in the ledger.

    The API objects can be injected (tests pass mocks); by default they come from the kubeconfig.
    Endpoints are the Services' in-cluster DNS names: the benchmark runs inside the cluster or
    through `kubectl port-forward`.
    """

    name = "kubernetes"
    status_fresh_s = 5.0  # one API server read per ask

    def __init__(
        self,
        store: Records,
        options: K8sOptions | None = None,
        apps: Any = None,
        core: Any = None,
        custom: Any = None,
        poll_s: float = 5.0,
        predicted: Callable[[Deployment, K8sOptions], K8sOptions] | None = None,
    ) -> None:
        self.store = store
        self.options = options or K8sOptions()
        self.predicted = predicted
        self.poll_s = poll_s
        if apps is None or core is None or custom is None:
            from kubernetes import client, config

            config.load_kube_config()
            apps, core, custom = client.AppsV1Api(), client.CoreV1Api(), client.CustomObjectsApi()
        self.apps, self.core, self.custom = apps, core, custom

    def options_for(self, deployment: Deployment) -> K8sOptions:
        """The options with the model's numbers for `deployment` filled in by `predicted` (the deploy capability's
        tools/deploy_preview.k8s_options); without it the options must carry them."""
        return self.predicted(deployment, self.options) if self.predicted else self.options

    def _manifests(self, deployment: Deployment) -> list[dict[str, Any]]:
        return render_manifests(deployment, self.options_for(deployment))

    # ---- apply / delete -------------------------------------------------------------------------
    def apply(self, obj: dict[str, Any]) -> None:
        from kubernetes.client.exceptions import ApiException

        ns, name, kind = self.options.namespace, obj["metadata"]["name"], obj["kind"]
        calls = {
            "Deployment": (self.apps.create_namespaced_deployment, self.apps.replace_namespaced_deployment),
            "Service": (self.core.create_namespaced_service, self.core.patch_namespaced_service),
            "Secret": (self.core.create_namespaced_secret, self.core.replace_namespaced_secret),
        }
        try:
            if kind == "LeaderWorkerSet":
                self.custom.create_namespaced_custom_object(*LWS_API[:2], ns, LWS_API[2], obj)
            else:
                calls[kind][0](ns, obj)
        except ApiException as exc:
            if exc.status != 409:  # already there: replace it
                raise
            if kind == "LeaderWorkerSet":
                self.custom.patch_namespaced_custom_object(*LWS_API[:2], ns, LWS_API[2], name, obj)
            else:
                calls[kind][1](name, ns, obj)

    def delete(self, obj: dict[str, Any]) -> None:
        from kubernetes.client.exceptions import ApiException

        ns, name, kind = self.options.namespace, obj["metadata"]["name"], obj["kind"]
        try:
            if kind == "Deployment":
                self.apps.delete_namespaced_deployment(name, ns)
            elif kind == "Service":
                self.core.delete_namespaced_service(name, ns)
            elif kind == "LeaderWorkerSet":
                self.custom.delete_namespaced_custom_object(*LWS_API[:2], ns, LWS_API[2], name)
            elif kind == "Secret":
                self.core.delete_namespaced_secret(name, ns)
        except ApiException as exc:
            if exc.status != 404:  # already gone is what we want
                raise

    def _ensure_secret(self, deployment: Deployment) -> None:
        """Create the API key Secret, and the HF token Secret from $HF_TOKEN when set (the values go to the API
        only, never a file)."""
        if deployment.engine != "vllm-omni":
            return
        from worldtune.sky.api_key import deployment_api_key

        self.apply(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "Opaque",
                "metadata": {
                    "name": api_key_secret(deployment),
                    "namespace": self.options.namespace,
                    "labels": pod_labels(deployment, 0),
                },
                "stringData": {API_KEY_ENV: deployment_api_key(self.store.path, deployment)},
            }
        )
        token = os.environ.get(HF_SECRET_KEY)
        if not token:
            return
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": self.options.hf_secret, "namespace": self.options.namespace, "labels": MANAGED_BY},
            "type": "Opaque",
            "stringData": {HF_SECRET_KEY: token},
        }
        self.apply(secret)

    # ---- the Backend protocol -------------------------------------------------------------------
    def launch(self, deployment: Deployment, progress: Progress | None = None) -> Deployment:
        options = self.options_for(deployment)
        objects = render_manifests(deployment, options)
        cluster = f"k8s/{self.options.namespace}/worldtune-{deployment.id}"
        self.store.ledger_launch(cluster, self.name, deployment.id, deployment.run_id)
        dep = deployment.model_copy(update={"cluster": cluster, "state": "provisioning"})
        self._ensure_secret(dep)
        for obj in objects:
            self.apply(obj)
            if progress:
                progress(f"applied {obj['kind']} {obj['metadata']['name']}", None)
        self.store.ledger_update(cluster, "loading")
        allowance = startup_allowance_s(deployment, cold_load_s(options.cold_load_s))
        deadline = time.time() + allowance + 600  # + scheduling and image pull
        while True:
            dep = self.status(dep.model_copy(update={"state": "loading"}))
            if dep.state == "ready" or time.time() > deadline:
                break
            if progress:
                progress(dep.detail, None)
            time.sleep(self.poll_s)
        if dep.state != "ready":
            self.teardown(dep)
            raise TimeoutError(f"{cluster} not ready in time: {dep.detail}")
        # one more load of the model: the first, or the pods' again after recover (billed as a relaunch's)
        ready = {"ready_at": time.time(), "endpoints": self.endpoints(deployment), "loads": deployment.loads + 1}
        dep = dep.model_copy(update=ready)
        self.store.ledger_update(cluster, "ready")
        return dep

    def endpoints(self, deployment: Deployment) -> list[str]:
        return [service_url(o) for o in self._manifests(deployment) if o["kind"] == "Service"]

    def status(self, deployment: Deployment) -> Deployment:
        from kubernetes.client.exceptions import ApiException

        if deployment.state == "terminated":
            return deployment
        ready, missing = 0, []
        workloads = [o for o in self._manifests(deployment) if o["kind"] != "Service"]
        for obj in workloads:
            ns, name = self.options.namespace, obj["metadata"]["name"]
            try:
                if obj["kind"] == "Deployment":
                    got = self.apps.read_namespaced_deployment_status(name, ns)
                    count = (got.status.ready_replicas or 0) if got.status else 0
                else:
                    got = self.custom.get_namespaced_custom_object_status(*LWS_API[:2], ns, LWS_API[2], name)
                    count = int((got.get("status") or {}).get("readyReplicas") or 0)
            except ApiException as exc:
                if exc.status != 404:
                    raise
                missing.append(name)
                continue
            ready += 1 if count >= 1 else 0
        if missing:
            # Someone (or node loss with no controller) removed what we applied: it is not coming back.
            state = "preempted" if deployment.state == "ready" else "failed"
            return deployment.model_copy(update={"state": state, "detail": f"missing: {', '.join(missing)}"})
        if ready == len(workloads):
            return deployment.model_copy(update={"state": "ready", "detail": f"{ready}/{len(workloads)} ready"})
        # A ready deployment whose pods are gone (node drained or reclaimed) is waiting for new ones.
        state = "preempted" if deployment.state == "ready" else "loading"
        return deployment.model_copy(update={"state": state, "detail": f"{ready}/{len(workloads)} ready"})

    def recover(self, deployment: Deployment, progress: Progress | None = None) -> Deployment:
        """Apply the manifests again (what was removed comes back; what is there is left) and wait for ready."""
        return self.launch(deployment.model_copy(update={"state": "pending", "ready_at": None}), progress)

    def replan(self, deployment: Deployment, plan: str, progress: Progress | None = None) -> Deployment:
        """Roll the pods under `plan` on the nodes they run on (sky/k8s_replan.py); the ledger row stays."""
        return k8s_replan.replan(self, deployment, plan, progress)

    def teardown(self, deployment: Deployment) -> Deployment:
        for obj in reversed(self._manifests(deployment)):
            self.delete(obj)
        if deployment.engine == "vllm-omni":
            self.delete({"kind": "Secret", "metadata": {"name": api_key_secret(deployment)}})
        cluster = deployment.cluster or f"k8s/{self.options.namespace}/worldtune-{deployment.id}"
        self.store.ledger_gone(cluster, "manifests deleted")
        return deployment.model_copy(update={"state": "terminated", "terminated_at": time.time()})
