"""Guardrails bind commitments, in the capability: price x hours asked, per run and for everything live.

The cloud is the recording stand-in in tests/fake_cloud.py (no cloud can be reached here); every
deploy below goes through worldtune.tools.deployments.deploy.deploy, the one path the CLI, MCP and agent share.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
from pathlib import Path

import fake_cloud
import pytest

from worldtune.tools.backends import registry as backend_registry
from worldtune.tools.deployments import deploy as deploying
from worldtune.tools.plans.spend import GUARDRAILS_ENV, check_commitment, check_tuning, needs_confirmation, quote
from worldtune.tools.store.database import Store
from worldtune.tools.words.deploy_request import DeployRequest
from worldtune.tools.words.deployment import Deployment
from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.infra import Infra
from worldtune.tools.words.plan import Plan


@pytest.fixture(autouse=True)
def _recording_cloud(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(GUARDRAILS_ENV, raising=False)
    monkeypatch.setattr(backend_registry, "SKY_BACKEND", fake_cloud.SEAM)
    fake_cloud.LAUNCHED.clear()


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "wt.db")


def provision(store: Store, run_id: str | None, hours: float = 3.2) -> Deployment:
    return deploying.deploy(
        DeployRequest(gpu="H200", plan="cfg2-u4-hsdp8", infra="nebius", engine="vllm-omni", hours=hours, run_id=run_id),
        store=store,
    )


def test_infra_is_parsed_once_and_malformed_forms_are_refused() -> None:
    assert Infra.parse("nebius/eu-north1") == Infra(kind="cloud", name="nebius", region="eu-north1")
    assert Infra.parse("slurm/localcluster").cluster == "localcluster"
    assert Infra.parse("K8s").kind == "kubernetes" and Infra.parse(" local ").is_local
    for bad, words in (
        ("local/x", "'local' with nothing after it"),
        ("slurm", "slurm/<cluster name>"),
        ("slurm/", "slurm/<cluster name>"),
        ("moon", "known clouds"),
        ("nebius/eu north", "nebius/REGION"),
        ("", "local, slurm/NAME"),
        ("a" * 500, "at most 100 characters"),
    ):
        with pytest.raises(InvalidInput, match="infra=") as caught:
            Infra.parse(bad)
        assert words in str(caught.value)
    # `local/x` used to be read as local (no confirmation) by one module and as a cloud by another
    with pytest.raises(InvalidInput, match="infra='local/x'"):
        needs_confirmation("local/x", "twin")


def test_a_cloud_region_is_priced_and_the_price_is_stored(store: Store) -> None:
    q = quote("deploy", "H200", Plan.parse("cfg2-u4-hsdp8"), infra="nebius/eu-north1", hours=1.0)
    assert q.offer is not None and q.offer.region == "eu-north1" and q.usd_per_hour == 28.0
    dep = deploying.deploy(
        DeployRequest(gpu="H200", plan="cfg2-u4-hsdp8", infra="nebius/eu-north1", engine="vllm-omni", hours=1.0),
        store=store,
    )
    assert dep.usd_per_hour == 28.0 and dep.committed_usd == pytest.approx(q.expected_usd)  # was stored as $0


def test_five_provisions_under_one_run_stop_at_the_run_cap(store: Store) -> None:
    started, refused = [], []
    for _ in range(5):
        try:
            started.append(provision(store, "run-R"))
        except InvalidInput as exc:
            refused.append(str(exc))
    each = started[0].committed_usd
    assert 90 < each < 100  # ~$94 each: every one fits max_usd_per_action=100
    assert len(started) == 3 == len(fake_cloud.LAUNCHED)  # 3 x $94 fits 300; the 4th would pass it
    assert all("run_usd=" in r and "max_usd_per_run=300" in r for r in refused)
    assert sum(d.committed_usd for d in store.list_deployments(run_id="run-R")) <= 300


def test_without_a_run_id_the_global_cap_still_applies(store: Store) -> None:
    started = []
    for _ in range(4):
        try:
            started.append(provision(store, None))
        except InvalidInput as exc:
            assert "committed_usd=" in str(exc) and "max_usd_committed=300" in str(exc)
    assert len(started) == 3 and len(fake_cloud.LAUNCHED) == 3


def test_a_torn_down_deployment_stops_committing_its_hours(store: Store) -> None:
    first = [provision(store, "run-A") for _ in range(3)]
    with pytest.raises(InvalidInput, match="committed_usd"):
        provision(store, "run-B")
    deploying.teardown(first[0].id, store=store)  # billed seconds only, now
    assert provision(store, "run-B").state == "ready"


def test_the_hours_asked_are_what_is_counted_and_bounded(store: Store) -> None:
    with pytest.raises(InvalidInput, match=r"hours=9.0 is not valid: at most max_hours_per_action"):
        provision(store, "run-H", hours=9.0)
    for bad in (math.inf, math.nan, -1.0):
        with pytest.raises(InvalidInput, match="hours="):
            provision(store, "run-H", hours=bad)
    assert fake_cloud.LAUNCHED == [] and store.list_deployments() == []


def test_own_clusters_are_not_free_unless_someone_says_so(store: Store, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    with pytest.raises(InvalidInput, match=r"usd_per_hour=None is not valid: a price per node-hour for slurm/gpus"):
        quote("deploy", "H200", Plan.parse("tp8"), infra="slurm/gpus")
    with pytest.raises(InvalidInput, match="usd_per_hour=None"):
        quote("deploy", "H200", Plan.parse("tp8"), infra="kubernetes")
    assert quote("deploy", "H200", Plan.parse("tp8"), infra="slurm/gpus", usd_per_hour=40.0).expected_usd > 40
    assert (
        quote("deploy", "H200", Plan.parse("tp8"), infra="slurm/worldtune-local").usd_per_hour == 0.0
    )  # shipped: this machine
    rails = tmp_path / "rails.yaml"
    rails.write_text("own_usd_per_hour: {kubernetes: 20.0}\n")
    monkeypatch.setenv(GUARDRAILS_ENV, str(rails))
    assert quote("deploy", "H200", Plan.parse("tp8"), infra="kubernetes").usd_per_hour == 20.0


def test_concurrent_deploys_cannot_both_pass_the_cap(store: Store) -> None:
    # 8 threads race for a cap that fits 3: the reservation holds the write lock from the read to the insert
    go = threading.Event()
    outcomes: list[str] = []

    def one() -> None:
        go.wait()
        try:
            provision(store, "run-C")
            outcomes.append("ok")
        except InvalidInput:
            outcomes.append("refused")

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    go.set()
    for t in threads:
        t.join()
    assert outcomes.count("ok") == 3 and outcomes.count("refused") == 5


def test_tuning_budgets_are_bound_from_arguments_and_goal_text() -> None:
    with pytest.raises(InvalidInput, match=r"goal budget=5000.0 is not valid: at most max_usd_per_run=300"):
        check_tuning("nebius", "vllm-omni", 5000.0, "goal budget")
    with pytest.raises(InvalidInput, match="budget_usd=inf is not valid: a finite number"):
        check_tuning("local", "twin", math.inf)
    with pytest.raises(InvalidInput, match="infra='azure' is not valid: one of allowed_infras"):
        check_tuning("azure", "vllm-omni", None)
    check_tuning("local", "twin", 5000.0)  # the local twin spends nothing


def test_a_cloud_without_prices_is_refused_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rails = tmp_path / "rails.yaml"
    rails.write_text("allowed_infras: [local, azure]\n")
    monkeypatch.setenv(GUARDRAILS_ENV, str(rails))
    # (which clouds are listed depends on the catalog files found, so only the refusal itself is checked)
    with pytest.raises(InvalidInput, match="infra='azure' is not valid: a cloud worldtune has prices for: "):
        check_tuning("azure", "vllm-omni", None)


def test_goal_text_budget_is_checked_like_the_argument() -> None:
    from worldtune.agent.configuration import TuneOptions
    from worldtune.agent.record import goal_for

    with pytest.raises(InvalidInput, match="goal budget=5000"):
        goal_for("cheapest per clip, p95 under 150 s, budget $5000", TuneOptions(infra="nebius", engine="vllm-omni"))
    with pytest.raises(InvalidInput, match="infra='local/evil'"):
        goal_for("cheapest per clip, p95 under 150 s", TuneOptions(infra="local/evil"))
    with pytest.raises(ValueError, match="budget_usd"):
        TuneOptions(budget_usd=math.inf)


def test_check_commitment_counts_what_is_live_not_only_what_was_billed() -> None:
    live = Deployment(gpu="H200", plan="tp8", state="ready", usd_per_hour=28.0, committed_usd=280.0, run_id="r")
    q = quote("deploy", "H200", Plan.parse("cfg2-u4-hsdp8"), infra="nebius", hours=1.0)
    with pytest.raises(InvalidInput, match="run_usd"):
        check_commitment(q, [live], "r")  # billed so far is ~$0; asked for is $280
    check_commitment(q, [live.model_copy(update={"state": "terminated", "terminated_at": live.created_at})], "r")


def test_the_skypilot_launch_downs_the_cluster_at_the_end_of_the_hours(tmp_path: Path) -> None:
    # SkyPilot is imported in a child under a private home (importing it here would fix this process's HOME)
    code = (
        "import json, os\n"
        "from pathlib import Path\n"
        "from worldtune.sky import home\n"
        "home.import_skypilot(Path(os.environ['WORLDTUNE_SKY_HOME']))\n"
        "from worldtune.sky.backend import SkyPilotBackend, hard_down_minutes\n"
        "from worldtune.tools.words.deployment import Deployment\n"
        "backend = object.__new__(SkyPilotBackend)\n"
        "from worldtune.tools.deployments.preview import render_options\n"
        "backend.autodown, backend.options, backend.predicted = True, None, render_options\n"
        "dep = Deployment(gpu='H200', plan='cfg2-u4-hsdp8', infra='nebius', engine='vllm-omni', hold_hours=2.0)\n"
        "held = backend.autodown_arguments(dep)\n"
        "idle = backend.autodown_arguments(dep.model_copy(update={'hold_hours': None}))\n"
        "print(json.dumps({'held': {**held, 'wait_for': held['wait_for'].value}, 'idle': idle,\n"
        "                  'minutes': hard_down_minutes(dep, backend.allowance_s(dep))}))\n"
    )
    env = {**os.environ, "WORLDTUNE_SKY_HOME": str(tmp_path / "sky-home"), "SKYPILOT_DISABLE_USAGE_COLLECTION": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    held = found["held"]
    assert held["down"] is True and held["wait_for"] == "none"  # fires while the serve job runs
    assert held["idle_minutes_to_autostop"] == found["minutes"] and 120 <= found["minutes"] < 180
    assert found["idle"] == {"down": True, "idle_minutes_to_autostop": 10}  # no hours asked: the idle net only
