"""Rendering a Deployment into a SkyPilot task: exact vLLM-Omni serve commands, GPU slices, ports, capacity."""

from __future__ import annotations

import csv
import json
import sqlite3
from pathlib import Path

import pytest

from worldtune.sky import catalog, render
from worldtune.sky.bench_job import new_samples
from worldtune.tools.deployments.preview import build_deployment, deployment_cold_load_s, render_options
from worldtune.tools.plans.offers import SNAPSHOT_FILE
from worldtune.tools.store.database import Store
from worldtune.tools.words.deployment import Deployment
from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.plan import Plan

PROFILER = "--enable-diffusion-pipeline-profiler"  # stage durations in every answer
NO_GUARDRAILS = "--no-guardrails"  # the workload's default: vLLM-Omni runs Cosmos3's guardrails unless told not to
RECIPE = ["--cfg-parallel-size", "2", "--ulysses-degree", "4", "--use-hsdp", "--hsdp-shard-size", "8"]
API_KEY = ["--api-key", '"$WORLDTUNE_API_KEY"']  # public servers take the key from a SkyPilot secret


def _argv_after_port(command: str) -> list[str]:
    words = command.split()
    return words[words.index("--port") + 2 :]


def test_cfg2_u4_hsdp8_on_h200_carries_the_reference_recipe_exactly() -> None:
    dep = build_deployment("H200", "cfg2-u4-hsdp8", infra="nebius")
    (command,) = render.serve_commands(dep)
    assert command.startswith("CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 vllm serve nvidia/Cosmos3-Super --omni ")
    assert _argv_after_port(command) == [*RECIPE, "--init-timeout", "1800", PROFILER, NO_GUARDRAILS, *API_KEY]
    assert Plan.parse("cfg2-u4-hsdp8").serve_flags() == RECIPE


def test_tp8_on_b200_is_one_server_with_tensor_parallel_8() -> None:
    dep = build_deployment("B200", "tp8", infra="nebius")
    (command,) = render.serve_commands(dep)
    assert _argv_after_port(command) == [
        "--tensor-parallel-size",
        "8",
        "--init-timeout",
        "1800",
        PROFILER,
        NO_GUARDRAILS,
        *API_KEY,
    ]
    task = render.render_task(dep, render_options(dep))
    assert task["resources"]["accelerators"] == "B200:8"
    assert task["resources"]["image_id"] == f"docker:{render.VLLM_OMNI_IMAGE}"


def test_8x1gpu_on_b200_runs_eight_servers_on_disjoint_gpus_and_distinct_ports() -> None:
    dep = build_deployment("B200", "8x1gpu", infra="nebius")
    commands = render.serve_commands(dep)
    assert len(commands) == 8
    gpus = [c.split()[0].removeprefix("CUDA_VISIBLE_DEVICES=") for c in commands]
    ports = [c.split()[c.split().index("--port") + 1] for c in commands]
    assert gpus == [str(i) for i in range(8)]
    assert ports == [str(8000 + i) for i in range(8)] and len(set(ports)) == 8
    assert all(_argv_after_port(c) == ["--init-timeout", "1800", PROFILER, NO_GUARDRAILS, *API_KEY] for c in commands)
    run = render.render_task(dep, render_options(dep))["run"]
    assert run.count("vllm serve") == 8 and render.ALL_READY_MARKER in run


def test_replica_slices_of_2xtp4_do_not_overlap() -> None:
    slices = render.replica_slices(Plan.parse("2xtp4"), base_port=9000)
    assert [s.gpus for s in slices] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert [s.port for s in slices] == [9000, 9001]


def test_twin_engine_runs_worldtune_twin_with_the_same_plan() -> None:
    dep = build_deployment("H200", "cfg2-u4-hsdp8", infra="slurm/worldtune-local", engine="twin", time_scale=50)
    opts = render.RenderOptions(host="127.0.0.1", worldtune="/opt/wt/bin/worldtune", base_port=18000)
    (command,) = render.serve_commands(dep, opts)
    assert "/opt/wt/bin/worldtune twin --port 18000 --gpu H200 --plan cfg2-u4-hsdp8 --time-scale 50" in command
    task = render.render_task(dep, render_options(dep, opts))
    assert "vllm" not in task["run"] and task["secrets"] == {"WORLDTUNE_API_KEY": None}  # no HF token to pass
    assert command.endswith(" ".join(API_KEY))  # the twin's port is guarded by the same key as vLLM-Omni's
    assert task["resources"] == {"infra": "slurm/worldtune-local", "accelerators": "H200:8"}
    # The twin loads in profile time / time scale, so its readiness allowance shrinks with it.
    load = deployment_cold_load_s(dep)
    assert render.startup_allowance_s(dep, load) < render.startup_allowance_s(
        dep.model_copy(update={"time_scale": 1.0}), load
    )


def test_spot_uses_spot_and_can_fall_back_to_on_demand() -> None:
    dep = build_deployment("H200", "cfg2-u4-hsdp8", infra="nebius", capacity="spot")
    assert dep.offer is not None and dep.offer.capacity == "spot" and dep.usd_per_hour == 11.60
    assert render.render_task(dep, render_options(dep))["resources"]["use_spot"] is True
    mixed = render.render_task(dep, render_options(dep, render.RenderOptions(spot_fallback=True)))["resources"]
    assert mixed["any_of"] == [{"use_spot": True}, {"use_spot": False}] and "use_spot" not in mixed


def test_serverless_is_a_skyserve_service_that_scales_to_zero() -> None:
    dep = build_deployment("H200", "8x1gpu", infra="nebius", capacity="serverless")
    service = render.render_task(dep, render_options(dep))
    policy = service["service"]["replica_policy"]
    assert policy["min_replicas"] == 0 and policy["max_replicas"] == 8
    probe = service["service"]["readiness_probe"]
    load = deployment_cold_load_s(dep)
    assert probe["path"] == "/health" and probe["initial_delay_seconds"] == render.startup_allowance_s(dep, load)
    assert service["resources"]["accelerators"] == "H200:1"
    assert render.cold_start_s(dep, load) > render.startup_allowance_s(dep, load) / 2


def test_sync_timeout_is_raised_and_the_hf_token_is_only_a_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_SENTINEL_never_rendered")
    dep = build_deployment("H200", "cfg2-u4-hsdp8", infra="nebius")
    task = render.render_task(dep, render_options(dep))
    text = render.to_yaml(task)
    assert "hf_SENTINEL" not in text
    assert task["secrets"] == {"HF_TOKEN": None, "WORLDTUNE_API_KEY": None}
    assert int(task["envs"]["VLLM_OMNI_VIDEO_SYNC_TIMEOUT"]) > 600
    assert "snapshot_download" in task["setup"] and "HF_TOKEN" not in task["setup"]


def test_pip_install_is_pinned() -> None:
    dep = build_deployment("H200", "cfg2-u4-hsdp8", infra="nebius")
    task = render.render_task(dep, render_options(dep, render.RenderOptions(install="pip")))
    assert "vllm-omni==0.30.0" in task["setup"] and "image_id" not in task["resources"]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"gpu": "H200", "plan": "tp8-hsdp8"}, "plan"),
        ({"gpu": "H200", "plan": "cfg2-u4-hsdp8", "infra": "slurm/x", "capacity": "spot"}, "capacity"),
        ({"gpu": "B200", "plan": "tp8", "capacity": "spot"}, "infra"),
        ({"gpu": "H200", "plan": "tp8", "engine": "sglang"}, "engine"),
        ({"gpu": "A100", "plan": "tp8"}, "gpu"),
    ],
)
def test_bad_inputs_are_refused_naming_the_field(kwargs: dict[str, str], field: str) -> None:
    with pytest.raises(InvalidInput) as err:
        build_deployment(**kwargs)
    assert err.value.field == field


def test_local_is_not_a_skypilot_task_and_kubernetes_is_skypilots_kubernetes() -> None:
    with pytest.raises(InvalidInput):
        local = Deployment(gpu="H200", plan="tp8", infra="local")
        render.render_task(local, render_options(local))
    kube = Deployment(gpu="H200", plan="tp8", infra="kubernetes", engine="vllm-omni")
    task = render.render_task(kube, render_options(kube))
    assert task["resources"]["infra"] == "kubernetes"


def test_catalog_rows_come_from_the_snapshot(tmp_path: Path) -> None:
    written = catalog.write_catalog(tmp_path, SNAPSHOT_FILE)
    root = catalog.catalog_root(tmp_path)
    assert root / "common" / "accelerators.csv" in written
    accel = {r["AcceleratorName"]: r["Clouds"] for r in csv.DictReader((root / "common/accelerators.csv").open())}
    assert "nebius" in accel["H200"] and "Slurm" in accel["H200"]
    rows = list(csv.DictReader((root / "nebius/vms.csv").open()))
    h200x8 = [r for r in rows if r["AcceleratorName"] == "H200" and r["AcceleratorCount"] == "8"]
    assert {r["Price"] for r in h200x8} == {"28.00"} and {r["SpotPrice"] for r in h200x8} == {"11.60"}
    b200 = [r for r in rows if r["AcceleratorName"] == "B200"]
    assert b200 and all(r["SpotPrice"] == "" for r in b200)
    # A user's own (fresher) catalog is kept.
    (root / "nebius/vms.csv").write_text("mine\n")
    assert root / "nebius/vms.csv" not in catalog.write_catalog(tmp_path, SNAPSHOT_FILE)
    assert (root / "nebius/vms.csv").read_text() == "mine\n"


def test_bench_job_reads_new_samples_from_the_benchmark_database(tmp_path: Path) -> None:
    db = tmp_path / "bench.db"
    assert new_samples(db, 0) == []
    store = Store(db)
    store.create_benchmark("b1", {})
    store.add_sample("b1", 0, {"ok": True, "latency_s": 1.5, "steps": 4})
    store.add_sample("b1", 1, {"ok": False, "error_kind": "timeout", "steps": 4})
    first = new_samples(db, 0)
    assert [s.seq for _, s in first] == [0, 1] and first[0][1].latency_s == 1.5
    assert new_samples(db, first[-1][0]) == []
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT count(*) FROM samples").fetchone()[0] == 2
    assert json.dumps(first[1][1].record())


def test_the_model_s_numbers_come_from_the_deploy_capability_and_rendering_refuses_without_them() -> None:
    """sky/ stands on the words: the cold load (start-up allowance) and the service time (SkyServe's target) are
    the calibrated profile's, filled in by tools/deploy_preview; a render without them names the missing field."""
    from worldtune.tools.plans.estimate import resolve_profile
    from worldtune.tools.words.models import get_model

    dep = build_deployment("H200", "8x1gpu", infra="nebius", capacity="serverless")
    load = resolve_profile("H200").load_time_s(get_model(dep.model).weights_gib_bf16, cold=True)
    filled = render_options(dep)
    assert filled.cold_load_s == pytest.approx(load) and deployment_cold_load_s(dep) == pytest.approx(load)
    assert filled.service_time_s is not None and filled.service_time_s > 0
    task = build_deployment("H200", "tp8", infra="nebius")  # a task needs no service time, unless shown as a service
    assert render_options(task).service_time_s is None and render_options(task, as_service=True).service_time_s
    assert render.render_service(task, render_options(task, as_service=True))["service"]["replica_policy"]
    given = render_options(dep, render.RenderOptions(cold_load_s=7.0, service_time_s=100.0))
    assert (given.cold_load_s, given.service_time_s) == (7.0, 100.0)  # what the caller gives wins
    for options, field in (
        (render.RenderOptions(service_time_s=100.0), "cold_load_s"),
        (render.RenderOptions(cold_load_s=7.0), "service_time_s"),
    ):
        with pytest.raises(InvalidInput) as err:
            render.render_task(dep, options)
        assert err.value.field == field
