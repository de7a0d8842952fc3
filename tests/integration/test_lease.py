"""The hours paid for, enforced on local twins (and by the same code on Kubernetes): tools/runs/lease.py.

A deployment with `hours` is torn down once they have run out after it was ready or after its last benchmark,
never while a benchmark measures it: by `lease.expire` (what `worldtune gc` and the MCP server's sweep call),
checked here at chosen instants (`now=`), and by a real `worldtune mcp` over stdio whose sweep takes the twin
down by itself (waited on by its event: the deployment's state, not a sleep).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp_cases import TWIN, cleanup, ok

from worldtune.tools.backends.local import _alive
from worldtune.tools.bench import lock as benchmark_lock
from worldtune.tools.deployments import deploy as deploying
from worldtune.tools.runs import lease
from worldtune.tools.store.database import Store
from worldtune.tools.words.deploy_request import DeployRequest
from worldtune.tools.words.errors import InvalidInput

pytestmark = pytest.mark.integration
WORLDTUNE = Path(sys.executable).parent / "worldtune"


def test_paid_hours_run_out_after_ready_or_the_last_benchmark_never_during_one(tmp_path: Path) -> None:
    store = Store(tmp_path / "w.db")
    dep = deploying.deploy(DeployRequest(gpu="H200", plan="cfg2-u4-hsdp8", time_scale=1000.0, hours=1.0), store=store)
    pids = list(dep.handle.pids)
    try:
        assert dep.ready_at is not None and dep.hold_hours == 1.0
        assert lease.deadline(store, dep) == pytest.approx(dep.ready_at + 3600.0)
        assert lease.expired(store, now=dep.ready_at + 3599.0) == []
        assert [d.id for d in lease.expired(store, now=dep.ready_at + 3601.0)] == [dep.id]

        # a benchmark measuring it holds the lease open, however late it is
        target = benchmark_lock.lock_target(dep.id, [])
        store.create_benchmark("b-held", {}, deployment_id=dep.id)
        assert store.take_lock(target, "b-held") is None
        assert lease.deadline(store, dep) is None and lease.expired(store, now=dep.ready_at + 10 * 3600) == []
        # once it has finished, the hours count again from its end
        store.update_benchmark("b-held", status="completed")
        store.release_lock(target, "b-held")
        ended = float(store.get_benchmark("b-held")["finished_at"])
        assert ended > dep.ready_at and lease.deadline(store, dep) == pytest.approx(ended + 3600.0)
        assert lease.expired(store, now=ended + 3599.0) == []

        done = lease.expire(store, now=ended + 3601.0)
        assert [row["deployment_id"] for row in done] == [dep.id] and done[0]["result"] == "down: its 1 h ran out"
        gone = store.get_deployment(dep.id)
        assert gone is not None and gone.state == "terminated" and "ran out" in gone.detail
        assert store.ledger(open_only=True) == [] and not any(_alive(pid) for pid in pids)
        assert lease.expire(store, now=ended + 7200.0) == []  # nothing left to expire
    finally:
        cleanup(store)


def test_a_deploy_without_hours_never_expires_and_a_bad_sweep_setting_is_refused(tmp_path: Path) -> None:
    store = Store(tmp_path / "w.db")
    dep = deploying.deploy(DeployRequest(gpu="H200", plan="cfg2-u4-hsdp8", time_scale=1000.0), store=store)
    try:
        assert dep.hold_hours is not None  # deploy always records the hours it quoted (1 h by default)
        forever = dep.model_copy(update={"hold_hours": None})
        store.save_deployment(forever)
        assert lease.expired(store, now=time.time() + 10**7) == []
    finally:
        cleanup(store)
    os.environ[lease.SWEEP_ENV] = "soon"
    try:
        with pytest.raises(InvalidInput) as refused:
            lease.sweep_interval_s()
        assert "WORLDTUNE_LEASE_SWEEP_S" in str(refused.value) and "'soon'" in str(refused.value)
    finally:
        del os.environ[lease.SWEEP_ENV]


def test_gc_lists_and_tears_down_a_deployment_whose_hours_ran_out(tmp_path: Path) -> None:
    db = tmp_path / "w.db"
    store = Store(db)
    dep = deploying.deploy(
        DeployRequest(gpu="H200", plan="cfg2-u4-hsdp8", time_scale=1000.0, hours=0.0001), store=store
    )  # 0.36 s
    try:
        while time.time() < (dep.ready_at or 0.0) + 0.5:  # the lease is wall time: let 0.36 s pass for sure
            time.sleep(0.1)
        env = {**os.environ, "SKYPILOT_DISABLE_USAGE_COLLECTION": "1"}
        listed = subprocess.run([str(WORLDTUNE), "gc", "--json", "--db", str(db)], capture_output=True, text=True,
                                env=env, check=True, timeout=300)  # fmt: skip
        rows = json.loads(listed.stdout)["would_tear_down"]
        assert [(r["deployment_id"], r["reason"]) for r in rows] == [(dep.id, "its 0.0001 h ran out")], rows
        assert store.get_deployment(dep.id).state == "ready"  # listing touches nothing
        torn = subprocess.run([str(WORLDTUNE), "gc", "--yes", "--json", "--db", str(db)], capture_output=True,
                              text=True, env=env, check=True, timeout=300)  # fmt: skip
        assert [r["result"] for r in json.loads(torn.stdout)["torn_down"]] == ["down: its 0.0001 h ran out"]
        assert store.get_deployment(dep.id).state == "terminated" and store.ledger(open_only=True) == []
    finally:
        cleanup(store)


def test_the_mcp_server_takes_a_deployment_down_when_its_hours_run_out(tmp_path: Path) -> None:
    db = tmp_path / "results.db"
    store = Store(db)
    env = {"SKYPILOT_DISABLE_USAGE_COLLECTION": "1", "WORLDTUNE_DB": str(db), "HOME": os.environ.get("HOME", "/root"),
           "XDG_CACHE_HOME": str(tmp_path / "cache"), lease.SWEEP_ENV: "0.2"}  # fmt: skip
    server = StdioServerParameters(command=str(WORLDTUNE), args=["mcp", "--db", str(db)], env=env)

    async def main() -> None:
        async with Client(server) as client:
            deployed = await ok(client, "deploy", {**TWIN, "hours": 0.0005})  # 1.8 s once ready
            dep_id = deployed["deployment"]["id"]
            # the event: the server's own sweep tears it down (terminated), then records why (a second write)
            with anyio.fail_after(240):
                while True:
                    seen = await ok(client, "get_deployment", {"deployment_id": dep_id})
                    if seen["state"] == "terminated" and "ran out" in seen["detail"]:
                        break
                    await anyio.sleep(0.2)
            gone = store.get_deployment(dep_id)
            assert gone is not None and "ran out" in gone.detail and store.ledger(open_only=True) == []

    try:
        anyio.run(main)
    finally:
        cleanup(store)
