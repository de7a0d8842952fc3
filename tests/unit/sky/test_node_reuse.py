"""Issue 18, keep the node and change the plan: cold vs warm loads per plan (model and twin), and the replan
operation on every backend (SkyPilot with a FAKE SkyPilot client, Kubernetes with a mocked API; the local
backend's real processes are tests/integration/test_replan_local.py)."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from worldtune.policies import perf_model
from worldtune.sky.backend import SkyPilotBackend
from worldtune.sky.k8s_manifests import K8sOptions
from worldtune.sky.k8s_replan import HOSTNAME_LABEL, PLAN_ANNOTATION, render_replan
from worldtune.sky.kubernetes import KubernetesBackend
from worldtune.sky.render import ALL_READY_MARKER
from worldtune.tools.deployments.preview import k8s_options, render_options
from worldtune.tools.deployments.replan import check_replan
from worldtune.tools.plans.estimate import resolve_profile
from worldtune.tools.plans.offers import cheapest_fitting_offer
from worldtune.tools.store.database import Store
from worldtune.tools.twin.engine import TwinConfig, TwinEngine
from worldtune.tools.words.deployment import Deployment, Handle, replan_target
from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.models import get_model
from worldtune.tools.words.plan import Plan
from worldtune.tools.words.workload import anchor_workload

SUPER = get_model("cosmos3-super")


def load(plan: str, cold: bool, gpu: str = "H200") -> float:
    return perf_model.load_time_s(SUPER, resolve_profile(gpu), cold=cold, plan=Plan.parse(plan))


def test_loads_match_the_published_readiness_figures() -> None:
    # REFERENCE.md: 280-290 s warm with HSDP, ~610 s cold (592 s in one cold run), TP8 about 90 s warm
    assert 280 <= load("cfg2-u4-hsdp8", cold=False) <= 290
    assert 590 <= load("cfg2-u4-hsdp8", cold=True) <= 630
    assert 85 <= load("tp8", cold=False) <= 95
    assert load("tp8", cold=True) > load("tp8", cold=False) + 300  # the disk read is once per node, whatever the plan
    assert load("tp2", cold=False) < load("cfg2-hsdp2", cold=False)
    prediction = perf_model.predict(anchor_workload("cosmos3-super"), Plan.parse("tp8"), resolve_profile("H200"))
    assert prediction.load_s == pytest.approx(load("tp8", False)) and prediction.cold_load_s > prediction.load_s


def test_the_load_figures_say_how_they_are_known() -> None:
    h200, b200 = resolve_profile("H200"), resolve_profile("B200")
    for name in ("load_gib_per_s_warm", "load_gib_per_s_cold", "load_tp_efficiency"):
        assert h200.basis_of(name).kind == "published" and "REFERENCE.md" in h200.basis_of(name).source
        assert b200.basis_of(name).kind == "assumed"  # nobody measured B200 loads
    assert h200.basis_of("load_base_s").kind == "assumed"


def test_the_twin_serves_the_cold_or_warm_load_of_its_plan() -> None:
    scale = 1e5
    cold = TwinEngine(TwinConfig(plan="cfg2-u4-hsdp8", cold_load=True, time_scale=scale))
    warm = TwinEngine(TwinConfig(plan="cfg2-u4-hsdp8", time_scale=scale))
    tp8 = TwinEngine(TwinConfig(plan="tp8", time_scale=scale, guardrails=False))
    guard = resolve_profile("H200").guardrail_startup_s
    assert cold.load_s == pytest.approx(load("cfg2-u4-hsdp8", True) + guard)
    assert warm.load_s == pytest.approx(load("cfg2-u4-hsdp8", False) + guard)
    assert tp8.load_s == pytest.approx(load("tp8", False))
    slept: list[float] = []

    async def record(model_s: float) -> None:
        slept.append(model_s)

    cold.sleep = record  # type: ignore[method-assign]
    asyncio.run(cold.load())
    assert slept == [pytest.approx(cold.load_s)]


def _node_dep(plan: str = "cfg2-u4-hsdp8", **kw: Any) -> Deployment:
    offer = cheapest_fitting_offer("H200", 8, capacity=["spot"])
    return Deployment(gpu="H200", plan=plan, offer=offer, state="ready", **kw)


def test_a_replan_must_fit_the_node_and_the_deployment_must_be_live() -> None:
    dep = _node_dep()
    assert str(replan_target(dep, "tp8")) == "tp8" and str(replan_target(dep, "1gpu")) == "1gpu"
    with pytest.raises(InvalidInput) as big:
        replan_target(dep, "2xcfg2-u4-hsdp8")
    assert big.value.field == "plan" and big.value.value == "2xcfg2-u4-hsdp8" and "at most 8 GPUs" in str(big.value)
    with pytest.raises(InvalidInput) as dead:
        replan_target(dep.model_copy(update={"state": "terminated"}), "tp8")
    assert dead.value.field == "deployment_id" and "terminated" in str(dead.value)
    with pytest.raises(InvalidInput) as bad:
        replan_target(dep, "tp3x")
    assert bad.value.field == "plan"


def test_check_replan_refuses_a_plan_vllm_omni_would_refuse(tmp_path: Path) -> None:
    store = Store(tmp_path / "w.db")
    dep = _node_dep()
    store.save_deployment(dep)
    ok = check_replan(dep.id, "tp8", store)
    assert ok.from_plan == "cfg2-u4-hsdp8" and ok.to_plan == "tp8" and ok.warm_load_s < ok.cold_load_s
    with pytest.raises(InvalidInput) as refused:
        check_replan(dep.id, "u3", store)  # Ulysses 3 does not divide the 8 KV heads
    assert refused.value.field == "plan"
    with pytest.raises(InvalidInput) as unknown:
        check_replan("wt-none", "tp8", store)
    assert unknown.value.field == "deployment_id"


class FakeSky:
    """The SkyPilot client calls a replan makes, recorded; requests are their own answers."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def get(self, request: Any) -> Any:
        return request

    def cancel(self, cluster: str, job_ids: list[int]) -> None:
        self.calls.append(("cancel", (cluster, job_ids)))

    def exec(self, task: Any, cluster_name: str) -> tuple[int, None]:
        self.calls.append(("exec", (cluster_name, task.run)))
        return 8, None

    def launch(self, *args: Any, **kw: Any) -> None:
        raise AssertionError("a replan must not launch a cluster")

    def status(self, clusters: list[str], **kw: Any) -> list[dict[str, Any]]:
        return [{"name": clusters[0], "status": "ClusterStatus.UP", "handle": None}]

    def tail_logs(self, cluster: str, job_id: int, follow: bool, output_stream: io.StringIO) -> None:
        output_stream.write(f"{ALL_READY_MARKER}\n" if job_id == 8 else "")

    def endpoints(self, cluster: str) -> dict[int, str]:
        return {port: f"203.0.113.7:{port}" for port in range(8000, 8016)}


def test_skypilot_replan_is_a_new_job_on_the_same_cluster(tmp_path: Path) -> None:
    backend = object.__new__(SkyPilotBackend)  # no SkyPilot home: the fake client stands in
    store = Store(tmp_path / "r.db")
    backend.store, backend.options, backend.poll_s, backend.autodown = store, None, 0.0, True
    backend.predicted = render_options  # the model's numbers, as tools/deploy.backend_for gives them
    backend.sky, backend.serve_jobs = FakeSky(), {}
    dep = _node_dep(infra="nebius", cluster="worldtune-wt-a", detail="serve job 7", handle=Handle(serve_job=7), loads=1)
    store.save_deployment(dep)
    store.ledger_launch("worldtune-wt-a", "skypilot", dep.id)
    with pytest.raises(InvalidInput):
        backend.replan(dep, "2xcfg2-u4-hsdp8")  # refused before anything is cancelled
    assert backend.sky.calls == []
    ready = backend.replan(dep, "2xcfg2-u2-hsdp4")
    kinds = [c[0] for c in backend.sky.calls]
    assert kinds == ["cancel", "exec"] and backend.sky.calls[0][1] == ("worldtune-wt-a", [7])
    assert backend.sky.calls[1][1][0] == "worldtune-wt-a" and "--plan cfg2-u2-hsdp4" in backend.sky.calls[1][1][1]
    assert ready.state == "ready" and ready.cluster == "worldtune-wt-a" and ready.detail == "serve job 8"
    assert str(ready.plan) == "2xcfg2-u2-hsdp4" and ready.loads == 2 and len(ready.endpoints) == 2
    (row,) = store.ledger(open_only=True)
    assert row["cluster"] == "worldtune-wt-a" and row["state"] == "ready" and row["detail"] == "serve job 8"


class AutostopSky(FakeSky):
    def __init__(self, refuse: bool = False) -> None:
        super().__init__()
        self.refuse = refuse

    def autostop(self, cluster: str, idle_minutes: int, wait_for: Any = None, down: bool = False) -> None:
        self.calls.append(("autostop", (cluster, idle_minutes, str(wait_for), down)))
        if self.refuse:
            raise RuntimeError("autostop is not supported here")


@pytest.mark.parametrize("refuse", [False, True])
def test_a_replan_with_new_hours_is_bound_by_the_guardrails_and_resets_skypilots_autodown(
    tmp_path: Path, refuse: bool
) -> None:
    """The agent's next measurement on a kept node asks for its own hours: checked like a deploy before the
    engine stops, stored as the new lease and commitment, and the cluster's hard autodown set to them (a
    SkyPilot that refuses leaves the earlier, shorter timer, and says so)."""
    from worldtune.sky.backend import hard_down_minutes
    from worldtune.tools.deployments import replan as replanning

    backend = object.__new__(SkyPilotBackend)  # no SkyPilot home: the fake client stands in
    store = Store(tmp_path / "r.db")
    backend.store, backend.options, backend.poll_s, backend.autodown = store, None, 0.0, True
    backend.predicted = render_options  # the model's numbers, as tools/deploy.backend_for gives them
    backend.sky, backend.serve_jobs = AutostopSky(refuse), {}
    dep = _node_dep(infra="nebius", cluster="worldtune-wt-b", detail="serve job 7", handle=Handle(serve_job=7),
                    loads=1, hold_hours=0.25, usd_per_hour=30.0, committed_usd=20.0)  # fmt: skip
    store.save_deployment(dep)
    store.ledger_launch("worldtune-wt-b", "skypilot", dep.id)
    with pytest.raises(InvalidInput) as long:
        replanning.replan(dep.id, "tp8", store, backend=backend, hours=9.0)  # max_hours_per_action is 8
    assert long.value.field == "hours" and "max_hours_per_action" in str(long.value) and backend.sky.calls == []
    check = replanning.check_replan(dep.id, "tp8", store, hours=2.0)
    assert check.hours == 2.0 and check.extension_usd == pytest.approx(30.0 * (check.warm_load_s / 3600 + 2.0), 1e-3)
    said: list[str] = []
    ready = replanning.replan(dep.id, "tp8", store, backend=backend, hours=2.0,
                              progress=lambda m, f: said.append(m))  # fmt: skip
    assert [c[0] for c in backend.sky.calls] == ["cancel", "exec", "autostop"]
    cluster, minutes, wait_for, down = backend.sky.calls[2][1]
    assert (
        cluster == "worldtune-wt-b"
        and minutes == hard_down_minutes(ready, backend.allowance_s(ready))
        and down
        and "NONE" in wait_for
    )
    assert ready.hold_hours == 2.0 and ready.committed_usd == pytest.approx(check.committed_usd, abs=0.01)
    stored = store.get_deployment(dep.id)
    assert stored is not None and stored.hold_hours == 2.0 and stored.state == "ready"
    assert any(("not reset" if refuse else "autodown set") in m for m in said), said
    backend.sky.calls.clear()
    replanning.replan(dep.id, "cfg2-u4-hsdp8", store, backend=backend, hours=2.0)  # same hours: timer as it is
    assert [c[0] for c in backend.sky.calls] == ["cancel", "exec"]


def test_kubernetes_replan_rolls_the_pods_on_the_same_nodes(tmp_path: Path) -> None:
    dep = _node_dep("2xcfg2-u2-hsdp4", infra="kubernetes", engine="vllm-omni")
    rolled = render_replan(
        dep, "tp8", k8s_options(dep, K8sOptions(hf_cache_host_path="/var/cache/worldtune")), ["node-a"]
    )
    (workload,) = [o for o in rolled.apply if o["kind"] == "Deployment"]
    template = workload["spec"]["template"]
    assert workload["metadata"]["name"] == f"worldtune-{dep.id}-r0"
    assert workload["spec"]["strategy"]["type"] == "Recreate"
    assert template["metadata"]["annotations"][PLAN_ANNOTATION] == "tp8"
    terms = template["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][0] == {
        "key": HOSTNAME_LABEL, "operator": "In", "values": ["node-a"]
    }  # fmt: skip
    assert {"name": "hf-cache", "hostPath": {"path": "/var/cache/worldtune", "type": "DirectoryOrCreate"}} in (
        template["spec"]["volumes"]
    )
    assert sorted(o["metadata"]["name"] for o in rolled.delete) == [f"worldtune-{dep.id}-r1"] * 2  # Deployment+Service
    assert rolled.warm and not render_replan(dep, "tp8", k8s_options(dep), []).warm

    store = Store(tmp_path / "k.db")
    apps, core, custom = mock.Mock(), mock.Mock(), mock.Mock()
    apps.read_namespaced_deployment_status.return_value = mock.Mock(status=mock.Mock(ready_replicas=1))
    pod = mock.Mock()
    pod.spec.node_name = "node-a"
    core.list_namespaced_pod.return_value = mock.Mock(items=[pod])
    backend = KubernetesBackend(store, apps=apps, core=core, custom=custom, poll_s=0, predicted=k8s_options)
    live = backend.launch(dep)
    apps.create_namespaced_deployment.reset_mock()
    ready = backend.replan(live, "tp8")
    assert ready.state == "ready" and str(ready.plan) == "tp8" and len(ready.endpoints) == 1
    applied = apps.create_namespaced_deployment.call_args.args[1]
    assert applied["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    assert apps.delete_namespaced_deployment.call_args.args[0] == f"worldtune-{dep.id}-r1"
    (row,) = store.ledger(open_only=True)
    assert row["state"] == "ready"


class RelaunchSky(FakeSky):
    """The calls a recovery makes after a preemption: down what is left of the cluster, launch it again."""

    def launch(self, *args: Any, **kw: Any) -> tuple[None, None]:
        self.calls.append(("launch", kw.get("cluster_name")))
        return None, None

    def down(self, cluster: str) -> None:
        self.calls.append(("down", cluster))


def test_a_skypilot_relaunch_after_a_preemption_is_one_more_load(tmp_path: Path) -> None:
    """The agent bills a relaunch by the loads a deployment gained under its benchmark (agent/steps.py
    relaunched_start_s): SkyPilot's launch set loads to 1 whatever came before, so a recovered node's relaunch
    (a new node's cold load) was never billed on SkyPilot. A SkyPilot client fake (no cloud here)."""
    backend = object.__new__(SkyPilotBackend)
    store = Store(tmp_path / "r.db")
    backend.store, backend.options, backend.poll_s, backend.autodown = store, None, 0.0, True
    backend.predicted = render_options
    backend.sky, backend.serve_jobs = RelaunchSky(), {}
    dep = _node_dep(
        infra="nebius", cluster="worldtune-wt-c", detail="serve job 7", handle=Handle(serve_job=7), loads=1
    ).model_copy(update={"state": "preempted"})
    store.save_deployment(dep)
    store.ledger_launch("worldtune-wt-c", "skypilot", dep.id)
    back = backend.recover(dep)
    assert [c[0] for c in backend.sky.calls] == ["down", "launch", "exec"]
    assert back.id == dep.id and back.state == "ready" and back.loads == 2
