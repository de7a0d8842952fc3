"""Keep the node, change the plan, locally: real twin processes are restarted under a new plan on the same
deployment (same id, same ledger row), the first load is cold and the later ones warm, a plan larger than
the node is refused before anything stops, and teardown still leaves nothing running."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from worldtune.tools.backends.local import _alive
from worldtune.tools.deployments import deploy as deploying
from worldtune.tools.deployments import replan as replanning
from worldtune.tools.store.database import Store
from worldtune.tools.words.deploy_request import DeployRequest
from worldtune.tools.words.errors import InvalidInput

pytestmark = pytest.mark.integration
SCALE = 300.0


def _load_lines(tmp_path: Path, deployment_id: str) -> list[str]:
    logs = sorted((tmp_path / "logs").glob(f"{deployment_id}-r*.log"))
    return [line for p in logs for line in p.read_text().splitlines() if "loading (" in line]


def test_replan_restarts_the_twin_warm_on_the_same_node(tmp_path: Path) -> None:
    store = Store(tmp_path / "w.db")
    dep = deploying.deploy(DeployRequest(gpu="H200", plan="cfg2-u4-hsdp8", time_scale=SCALE, run_id="r1"), store=store)
    pids: list[int] = []
    try:
        first_pids = list(dep.handle.pids)
        pids += first_pids
        (row,) = store.ledger(open_only=True)
        assert dep.loads == 1 and "loading (cold) 623 model s" in _load_lines(tmp_path, dep.id)[0]

        with pytest.raises(InvalidInput) as refused:  # 16 GPUs on an 8-GPU node: refused, nothing stopped
            replanning.replan(dep.id, "2xcfg2-u4-hsdp8", store=store)
        assert refused.value.field == "plan" and "at most 8 GPUs" in str(refused.value)
        assert all(_alive(pid) for pid in first_pids)

        seen: list[str] = []
        tp = replanning.replan(dep.id, "tp8", store=store, progress=lambda m, f: seen.append(m))
        pids += list(tp.handle.pids)
        assert tp.id == dep.id and tp.state == "ready" and str(tp.plan) == "tp8"
        assert tp.previous_plans == ["cfg2-u4-hsdp8"]
        assert tp.loads == 2 and tp.cluster == dep.cluster and tp.committed_usd == dep.committed_usd
        assert not any(_alive(pid) for pid in first_pids)  # the old servers are gone
        assert "loading (warm) 90 model s" in _load_lines(tmp_path, dep.id)[-1]  # TP8: ~90 s, no guardrails
        assert httpx.get(f"{tp.endpoints[0]}/health").json() == {"status": "healthy"}
        (same,) = store.ledger(open_only=True)
        assert same["cluster"] == row["cluster"] and same["launched_at"] == row["launched_at"]
        assert same["owner_id"] == row["owner_id"] and same["state"] == "ready"
        assert any("warm load" in m for m in seen)

        two = replanning.replan(dep.id, "2xcfg2-u2-hsdp4", store=store)  # two replicas on the same 8 GPUs
        pids += list(two.handle.pids)
        assert len(two.endpoints) == 2 and two.loads == 3 and two.previous_plans == ["cfg2-u4-hsdp8", "tp8"]
        assert all("loading (warm) 288 model s" in line for line in _load_lines(tmp_path, dep.id)[-2:])
        assert len(store.ledger()) == 1  # one node all along
    finally:
        gone = deploying.teardown(dep.id, store=store)
    assert gone.state == "terminated"
    assert not any(_alive(pid) for pid in pids)
    assert store.ledger(open_only=True) == []
    with pytest.raises(InvalidInput) as late:  # a torn-down deployment cannot be replanned
        replanning.replan(dep.id, "tp8", store=store)
    assert late.value.field == "deployment_id"
