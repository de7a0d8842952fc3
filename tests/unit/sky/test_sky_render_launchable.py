"""Rendered artifacts that launch and are safe at launch (issue 15): setup without a workdir, an autoscaling
target from the plan's service time, an API key on public servers that the benchmark sends."""

from __future__ import annotations

from pathlib import Path

import pytest

from worldtune.sky import render
from worldtune.tools.bench.benchmark import auth_headers
from worldtune.tools.deployments.preview import build_deployment, render_options
from worldtune.tools.plans.estimate import estimate_plan, resolve_profile
from worldtune.tools.words.deployment import API_KEY_ENV
from worldtune.tools.words.plan import Plan
from worldtune.tools.words.workload import anchor_workload


def test_serverless_target_is_one_over_the_service_time() -> None:
    deployment = build_deployment("H200", "2xtp4", infra="nebius", capacity="serverless")
    service = render.render_service(deployment, render_options(deployment))
    target = service["service"]["replica_policy"]["target_qps_per_replica"]
    latency = estimate_plan(anchor_workload(), "H200", Plan.parse("tp4"), resolve_profile("H200")).latency_s
    assert latency and target == pytest.approx(1.0 / latency, rel=0.01)
    measured = render.render_service(deployment, render_options(deployment, render.RenderOptions(service_time_s=200.0)))
    assert measured["service"]["replica_policy"]["target_qps_per_replica"] == pytest.approx(0.005)


def test_service_replicas_need_no_worldtune_and_no_workdir() -> None:
    deployment = build_deployment("H200", "2xtp4", infra="nebius", capacity="serverless")
    service = render.render_service(deployment, render_options(deployment, render.RenderOptions(ship_worldtune=True)))
    assert "workdir" not in service and "worldtune" not in service["setup"]
    twin = build_deployment("H200", "2xtp4", infra="nebius", engine="twin", capacity="serverless")
    twin_service = render.render_service(twin, render_options(twin, render.RenderOptions(ship_worldtune=True)))
    assert "pip install --quiet ." in twin_service["setup"] and twin_service.get("workdir")  # shipped with it


def test_a_task_without_a_checkout_installs_the_release(monkeypatch: pytest.MonkeyPatch) -> None:
    from worldtune import __version__

    monkeypatch.setattr(render, "shipped_checkout", lambda: None)
    tp8 = build_deployment("H200", "tp8", infra="nebius")
    task = render.render_task(tp8, render_options(tp8, render.RenderOptions(ship_worldtune=True)))
    assert (
        "workdir" not in task
        and f"worldtune=={__version__}" in task["setup"]
        and "install --quiet ." not in task["setup"]
    )


def test_public_servers_take_an_api_key_secret() -> None:
    deployment = build_deployment("H200", "cfg2-u4-hsdp8", infra="nebius")
    task = render.render_task(deployment, render_options(deployment))
    assert task["secrets"] == {render.HF_TOKEN: None, API_KEY_ENV: None}
    assert all(c.endswith(f'--api-key "${API_KEY_ENV}"') for c in render.serve_commands(deployment))
    assert "Authorization" in task["run"]  # the readiness probe sends it
    serverless = build_deployment("H200", "2xtp4", infra="nebius", capacity="serverless")
    service = render.render_service(serverless, render_options(serverless))
    assert service["service"]["readiness_probe"]["path"] == "/health"  # vLLM's unguarded route


def test_benchmark_sends_the_key_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    assert auth_headers() == {}
    monkeypatch.setenv(API_KEY_ENV, "k-123")
    assert auth_headers() == {"Authorization": "Bearer k-123"}


def test_kubernetes_dry_run_prices_validates_and_writes_task_yaml(tmp_path: Path) -> None:
    from worldtune.sky.preview import write_preview
    from worldtune.tools.deployments.preview import preview as preview_of

    deployment = build_deployment("B200", "2xtp4", infra="kubernetes")
    preview = preview_of(deployment)
    assert (
        preview.usd_per_hour > 0 and "no rental price" in preview.optimizer_note and "as of" in preview.optimizer_note
    )
    assert any(v.startswith("kubernetes-validate --strict") for v in preview.validated_by), preview.validated_by
    written = {p.name for p in write_preview(preview, tmp_path)}
    assert "task.yaml" in written and "serve-commands.sh" in written
    assert (tmp_path / "task.yaml").read_text().count("infra: kubernetes") == 1


def test_a_launch_from_python_carries_its_secrets_inline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SkyPilot reads a secret named without a value as a managed-secret reference, which Task.update_secrets does
    not clear, so `sky.launch` then refuses ("No value available for secret(s)"; seen on the local Slurm cluster).
    The backend's config carries the values; HF_TOKEN only when it is set."""
    from worldtune.sky.backend import SkyPilotBackend
    from worldtune.sky.dryrun import validate_task
    from worldtune.tools.store.database import Store

    monkeypatch.delenv(API_KEY_ENV, raising=False)
    monkeypatch.delenv(render.HF_TOKEN, raising=False)
    backend = SkyPilotBackend(Store(tmp_path / "wt.db"))
    for engine in ("vllm-omni", "twin"):
        deployment = build_deployment("H200", "tp8", infra="nebius", engine=engine)
        config = render.render_task(deployment, render_options(deployment))
        assert validate_task(config).managed_secret_refs  # the rendered YAML: names for `--secret NAME=value`
        task = validate_task(backend.with_secrets(deployment, config))
        assert not task.managed_secret_refs and set(task.secrets) == {API_KEY_ENV}
        assert task.secrets[API_KEY_ENV].get_secret_value() == (tmp_path / "api-keys" / deployment.id).read_text()
    monkeypatch.setenv(render.HF_TOKEN, "hf-test")
    deployment = build_deployment("H200", "tp8", infra="nebius")
    task = validate_task(backend.with_secrets(deployment, render.render_task(deployment, render_options(deployment))))
    assert set(task.secrets) == {API_KEY_ENV, render.HF_TOKEN}
