"""The ledger's garbage (what `worldtune gc` tears down), the local cluster's bridge venv, and backend odds and ends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from worldtune.sky import backend, bench_remote, local_cluster
from worldtune.tools.deployments.preview import build_deployment
from worldtune.tools.runs import garbage
from worldtune.tools.store.database import Store
from worldtune.tools.words.deployment import Deployment, Handle

WORLDTUNE = str(Path(sys.executable).parent / "worldtune")


def launched_by_a_gone_process(db: Path, cluster: str, backend: str, deployment_id: str | None = None) -> None:
    """A ledger row written by a standalone deploy process that has exited since."""
    code = (
        f"from worldtune.tools.store.database import Store; Store({str(db)!r}).ledger_launch({cluster!r}, {backend!r}, "
    )
    subprocess.run([sys.executable, "-c", code + f"{deployment_id!r})"], check=True, timeout=60)


def test_garbage_is_every_open_row_whose_owner_is_gone(tmp_path: Path) -> None:
    db = tmp_path / "wt.db"
    store = Store(db)
    store.add_run("run-live", "tune")  # owned by this (live) process
    store.add_run("run-done", "tune")
    store.finish_run("run-done", "completed", {})  # a finished run lets go of what it left
    store.ledger_launch("worldtune-a", "skypilot", "wt-a", "run-live")
    store.ledger_launch("worldtune-b", "skypilot", "wt-b", "run-done")
    launched_by_a_gone_process(db, "worldtune-c", "skypilot")  # as `worldtune deploy` leaves it
    store.ledger_launch("worldtune-d", "skypilot", "wt-d", None)
    store.ledger_gone("worldtune-d")
    store.ledger_launch("worldtune-e", "skypilot", "wt-e", None)  # this live process deployed it: still owned
    assert [r["cluster"] for r in garbage.garbage(store)] == ["worldtune-b", "worldtune-c"]


def test_gc_lists_without_yes_and_a_row_it_cannot_tear_down_stays_open(tmp_path: Path) -> None:
    db = tmp_path / "wt.db"
    store = Store(db)
    launched_by_a_gone_process(db, "k8s/default/worldtune-wt-x", "kubernetes", "wt-x")  # no stored deployment
    out = subprocess.run([WORLDTUNE, "gc", "--db", str(db), "--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert [r["cluster"] for r in data["would_tear_down"]] == ["k8s/default/worldtune-wt-x"] and not data["torn_down"]
    (done,) = garbage.collect_garbage(store, garbage.garbage(store))
    assert done["result"].startswith("failed:") and "by hand" in done["result"]
    (row,) = store.ledger(open_only=True)
    assert row["state"] == "down-failed"


def test_bridge_venv_lets_the_system_python_import_this_worldtune(tmp_path: Path) -> None:
    if not Path(local_cluster.SYSTEM_PYTHON).exists():
        pytest.skip("no system python3")
    try:
        python = local_cluster.ensure_bridge(tmp_path / "bridge")
    except ValueError as exc:  # another minor version: the error names the setting to use instead
        assert local_cluster.PYTHON_ENV in str(exc)
        return
    out = subprocess.run([str(python), "-c", "import worldtune.tools.words.plan as p; print(p.__file__)"],
                         capture_output=True, text=True, timeout=60, env={"PATH": os.environ["PATH"]})  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("tools/words/plan.py")
    assert local_cluster.ensure_bridge(tmp_path / "bridge") == python  # idempotent


def test_slurm_render_options_bind_loopback_on_free_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(local_cluster.PYTHON_ENV, "/opt/py/bin/python")
    dep = build_deployment("H200", "2xtp4", infra="slurm/worldtune-local", engine="twin")
    opts = backend.render_options_for(dep)
    assert opts.host == "127.0.0.1" and not opts.open_ports and opts.worldtune == "/opt/py/bin/python -m worldtune.cli"
    assert 18000 <= opts.base_port < 30000
    monkeypatch.setenv(backend.BASE_PORT_ENV, "23456")
    assert backend.render_options_for(dep).base_port == 23456
    cloud = backend.render_options_for(build_deployment("H200", "tp8", infra="nebius"))
    assert cloud.ship_worldtune and cloud.host == "0.0.0.0"


def test_serve_job_id_is_kept_in_the_deployments_handle() -> None:
    dep = Deployment(gpu="H200", plan="tp8", handle=Handle(serve_job=7), detail="serve job 7")
    assert Deployment.model_validate_json(dep.model_dump_json()).handle.serve_job == 7
    assert Deployment(gpu="H200", plan="tp8").handle.serve_job is None
    assert bench_remote._after("(task, pid=3) WORLDTUNE_RESULT {}", "WORLDTUNE_RESULT") == "{}"


def test_gc_settles_a_dead_runs_records_even_with_nothing_launched(tmp_path: Path) -> None:
    """Killed between recording a deployment and launching it: no ledger row, but a 'pending' deployment and
    a 'running' run. gc marks the deployment terminated and the run interrupted (resume continues it)."""
    db = tmp_path / "wt.db"
    code = (
        "from worldtune.tools.store.database import Store\nfrom worldtune.tools.words.deployment import Deployment\n"
        f"store = Store({str(db)!r})\nstore.add_run('run-killed', 'tune')\n"
        "store.save_deployment(Deployment(id='wt-pending', gpu='H200', plan='tp8', run_id='run-killed'))"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    store = Store(db)
    store.add_run("run-alive", "tune")
    store.save_deployment(Deployment(id="wt-alive", gpu="H200", plan="tp8", run_id="run-alive"))
    found = garbage.garbage(store)
    assert [(r["deployment_id"], r["backend"]) for r in found] == [("wt-pending", garbage.RECORD_ONLY)]
    assert [r["id"] for r in garbage.dead_runs(store)] == ["run-killed"]
    (done,) = garbage.collect_garbage(store, found)
    assert "terminated" in done["result"]
    gone = store.get_deployment("wt-pending")
    assert gone is not None and gone.state == "terminated"
    assert [d.id for d in store.list_deployments(alive_only=True)] == ["wt-alive"]
    run = store.get_run("run-killed")
    assert run is not None and run["status"] == "interrupted" and "resume" in run["summary"]
    assert garbage.dead_runs(store) == [] and garbage.garbage(store) == []
