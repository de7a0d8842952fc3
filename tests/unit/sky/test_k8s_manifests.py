"""Kubernetes manifests of a deployment, validated with kubernetes-validate --strict and the LWS CRD schema.

No Kubernetes API server can run here: the backend tests drive KubernetesBackend against mocked API
objects (named *_mocked_k8s_api) and check what it asks the API to do and what the ledger records.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from unittest import mock

import jsonschema
import kubernetes_validate
import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from worldtune.sky.k8s_manifests import GPU_RESOURCE, K8sOptions, render_manifests
from worldtune.sky.kubernetes import KubernetesBackend
from worldtune.sky.render import startup_allowance_s
from worldtune.tools.deployments.preview import deployment_cold_load_s, k8s_options
from worldtune.tools.store.database import Store
from worldtune.tools.words.deployment import Deployment
from worldtune.tools.words.errors import InvalidInput

K8S_VERSION = kubernetes_validate.latest_version()
LWS_SCHEMA = json.loads((Path(__file__).parents[3] / "sky" / "lws-crd-schema.json").read_text())
WORLDTUNE = str(Path(sys.executable).parent / "worldtune")


def _dep(plan: str, gpu: str = "H200", **kw: Any) -> Deployment:
    return Deployment(gpu=gpu, plan=plan, infra="kubernetes", engine="vllm-omni", **kw)


def validate(obj: dict[str, Any]) -> None:
    """Built-in kinds strictly against the Kubernetes schema; LWS against its CRD schema + pod templates."""
    if obj["kind"] == "LeaderWorkerSet":
        jsonschema.validate(obj, LWS_SCHEMA)
        for role in ("leaderTemplate", "workerTemplate"):
            template = obj["spec"]["leaderWorkerTemplate"][role]
            pod_template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": template}
            kubernetes_validate.validate(pod_template, K8S_VERSION, strict=True)
    else:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


@pytest.mark.parametrize(("gpu", "plan"), [("H200", "cfg2-u4-hsdp8"), ("B200", "tp8"), ("B200", "8x1gpu")])
def test_deployment_and_service_per_replica_validate_strictly(gpu: str, plan: str) -> None:
    dep = _dep(plan, gpu)
    objects = render_manifests(dep, k8s_options(dep))
    for obj in objects:
        validate(obj)
    kinds = [o["kind"] for o in objects]
    replicas = 8 if plan == "8x1gpu" else 1
    assert kinds == ["Deployment", "Service"] * replicas
    names = {o["metadata"]["name"] for o in objects}
    assert len(names) == replicas  # a Deployment and its Service share a name
    pod = objects[0]["spec"]["template"]["spec"]
    server = pod["containers"][0]
    assert server["resources"]["limits"][GPU_RESOURCE] == ("1" if replicas == 8 else "8")
    assert {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}} in pod["volumes"]
    assert {"name": "shm", "mountPath": "/dev/shm"} in server["volumeMounts"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):  # /v1 needs the API key; /health does not
        assert server[probe]["httpGet"]["path"] == "/health"  # (vLLM-Omni listens only once loaded; 503 when dead)
    startup = server["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= startup_allowance_s(
        dep, deployment_cold_load_s(dep)
    )
    token = next(e for e in server["env"] if e["name"] == "HF_TOKEN")
    assert token == {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "worldtune-hf-token", "key": "HF_TOKEN"}},
    }
    assert server["command"][:4] == ["vllm", "serve", "nvidia/Cosmos3-Super", "--omni"]
    # the public server takes an API key from a per-deployment Secret, by name only (the kubelet expands $(..))
    assert server["command"][-2:] == ["--api-key", "$(WORLDTUNE_API_KEY)"]
    key = next(e for e in server["env"] if e["name"] == "WORLDTUNE_API_KEY")
    assert key == {
        "name": "WORLDTUNE_API_KEY",
        "valueFrom": {"secretKeyRef": {"name": f"worldtune-{dep.id}-api-key", "key": "WORLDTUNE_API_KEY"}},
    }


def test_strict_validation_can_fail() -> None:
    tp8 = _dep("tp8")
    obj = render_manifests(tp8, k8s_options(tp8))[0]
    obj["spec"]["template"]["spec"]["containers"][0]["gpuCount"] = 8  # not a Container field
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(obj)


def test_a_replica_wider_than_a_node_becomes_a_leader_worker_set() -> None:
    wide = _dep("cfg2-u4-hsdp8")
    objects = render_manifests(wide, k8s_options(wide, K8sOptions(gpus_per_node=4)))
    assert [o["kind"] for o in objects] == ["LeaderWorkerSet", "Service"]
    for obj in objects:
        validate(obj)
    lws = objects[0]["spec"]["leaderWorkerTemplate"]
    assert lws["size"] == 2
    leader = lws["leaderTemplate"]["spec"]["containers"][0]
    assert "--worker-backend ray" in leader["command"][-1] and "ray start --head" in leader["command"][-1]
    assert leader["resources"]["limits"][GPU_RESOURCE] == "4"
    assert objects[1]["spec"]["selector"]["role"] == "leader"
    broken = json.loads(json.dumps(objects[0]))
    broken["spec"]["leaderWorkerTemplate"]["sizes"] = 2
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, LWS_SCHEMA)
    with pytest.raises(InvalidInput):
        render_manifests(wide, k8s_options(wide, K8sOptions(gpus_per_node=3)))


def test_twin_on_kubernetes_needs_an_image_with_worldtune() -> None:
    dep = Deployment(gpu="H200", plan="cfg2-u4-hsdp8", infra="kubernetes", engine="twin", time_scale=20)
    with pytest.raises(InvalidInput) as err:
        render_manifests(dep, k8s_options(dep))
    assert err.value.field == "twin_image"
    objects = render_manifests(dep, k8s_options(dep, K8sOptions(twin_image="registry.example/worldtune:0.1.0")))
    for obj in objects:
        validate(obj)
    server = objects[0]["spec"]["template"]["spec"]["containers"][0]
    assert server["command"][:2] == ["worldtune", "twin"] and "limits" in server["resources"]
    assert not server["resources"]["limits"] and all(e["name"] != "HF_TOKEN" for e in server["env"])


def test_cli_dry_run_writes_manifests_that_pass_kubernetes_validate_strict(tmp_path: Path) -> None:
    env = {**os.environ, "WORLDTUNE_SKY_HOME": str(tmp_path / "h"), "SKYPILOT_DISABLE_USAGE_COLLECTION": "1"}
    out = subprocess.run([WORLDTUNE, "deploy", "--gpu", "B200", "--plan", "2xtp4", "--infra", "kubernetes",
                          "--usd-per-hour", "40", "--dry-run", "--out", str(tmp_path / "out"), "--json"],
                         capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    assert out.returncode == 0, out.stderr
    files = sorted((tmp_path / "out" / "manifests").glob("*.yaml"))
    assert len(files) == 4
    cli = Path(sys.executable).parent / "kubernetes-validate"
    checked = subprocess.run([str(cli), "--strict", *map(str, files)], capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    loaded = [yaml.safe_load(f.read_text()) for f in files]
    assert {o["kind"] for o in loaded} == {"Deployment", "Service"}
    assert json.loads(out.stdout)["kind"] == "kubernetes" and not (tmp_path / "h").exists()


def _ready_status(count: int) -> mock.Mock:
    return mock.Mock(status=mock.Mock(ready_replicas=count))


def test_backend_apply_wait_and_delete_mocked_k8s_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")
    store = Store(tmp_path / "wt.db")
    apps, core, custom = mock.Mock(), mock.Mock(), mock.Mock()
    polls: dict[str, int] = {}

    def read_status(name: str, namespace: str) -> mock.Mock:  # each pod becomes ready on its second look
        polls[name] = polls.get(name, 0) + 1
        return _ready_status(0 if polls[name] == 1 else 1)

    apps.read_namespaced_deployment_status.side_effect = read_status
    backend = KubernetesBackend(
        store, K8sOptions(namespace="gpu"), apps=apps, core=core, custom=custom, poll_s=0, predicted=k8s_options
    )
    dep = _dep("2xtp4")
    seen: list[str] = []
    ready = backend.launch(dep, lambda m, f: seen.append(m))
    assert any("0/2 ready" in m for m in seen)
    assert ready.loads == 1  # its first load: a recover's is one more, billed as a relaunch (agent/steps.py)
    assert ready.state == "ready" and ready.endpoints == [
        f"http://worldtune-{dep.id}-r{i}.gpu.svc.cluster.local:8000" for i in range(2)
    ]
    assert apps.create_namespaced_deployment.call_count == 2 and core.create_namespaced_service.call_count == 2
    key_secret, hf_secret = (c.args[1] for c in core.create_namespaced_secret.call_args_list)
    assert hf_secret["stringData"] == {"HF_TOKEN": "hf_test_token"}
    key_file = tmp_path / "api-keys" / dep.id  # generated once, 0600, where worldtune's benchmark reads it
    assert key_secret["metadata"]["name"] == f"worldtune-{dep.id}-api-key" and key_file.stat().st_mode & 0o077 == 0
    assert key_secret["stringData"] == {"WORLDTUNE_API_KEY": key_file.read_text().strip()}
    (row,) = store.ledger(open_only=True)
    assert row["state"] == "ready" and row["backend"] == "kubernetes"
    gone = backend.teardown(ready)
    assert gone.state == "terminated"
    assert apps.delete_namespaced_deployment.call_count == 2 and core.delete_namespaced_service.call_count == 2
    assert core.delete_namespaced_secret.call_args.args == (f"worldtune-{dep.id}-api-key", "gpu")
    assert store.ledger(open_only=True) == []


def test_backend_replaces_existing_objects_and_sees_preemption_mocked_k8s_api(tmp_path: Path) -> None:
    store = Store(tmp_path / "wt.db")
    apps, core, custom = mock.Mock(), mock.Mock(), mock.Mock()
    apps.create_namespaced_deployment.side_effect = ApiException(status=409)
    apps.read_namespaced_deployment_status.return_value = _ready_status(1)
    backend = KubernetesBackend(store, apps=apps, core=core, custom=custom, poll_s=0, predicted=k8s_options)
    ready = backend.launch(_dep("tp8"))
    assert apps.replace_namespaced_deployment.call_count == 1
    apps.read_namespaced_deployment_status.return_value = _ready_status(0)
    assert backend.status(ready).state == "preempted"
    apps.read_namespaced_deployment_status.side_effect = ApiException(status=404)
    assert backend.status(ready).state == "preempted" and "missing" in backend.status(ready).detail
    apps.delete_namespaced_deployment.side_effect = ApiException(status=404)  # already gone is fine
    assert backend.teardown(ready).state == "terminated"


def test_paid_hours_run_out_on_kubernetes_mocked_k8s_api(tmp_path: Path) -> None:
    """Kubernetes has no autodown: tools/runs/lease.py deletes the objects once the hours asked have run out."""
    from worldtune.tools.runs import lease

    store = Store(tmp_path / "wt.db")
    apps, core, custom = mock.Mock(), mock.Mock(), mock.Mock()
    apps.read_namespaced_deployment_status.return_value = _ready_status(1)
    backend = KubernetesBackend(store, apps=apps, core=core, custom=custom, poll_s=0, predicted=k8s_options)
    ready = backend.launch(_dep("tp8").model_copy(update={"hold_hours": 2.0}))
    store.save_deployment(ready)
    assert ready.ready_at is not None and store.ledger(open_only=True)
    assert lease.expire(store, now=ready.ready_at + 2 * 3600 - 1, backend_for=lambda d: backend) == []
    assert apps.delete_namespaced_deployment.call_count == 0
    (done,) = lease.expire(store, now=ready.ready_at + 2 * 3600 + 1, backend_for=lambda d: backend)
    assert done["result"] == "down: its 2 h ran out" and apps.delete_namespaced_deployment.call_count == 1
    gone = store.get_deployment(ready.id)
    assert gone is not None and gone.state == "terminated" and store.ledger(open_only=True) == []
