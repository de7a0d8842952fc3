"""`worldtune deploy` and `worldtune gc`: bring a plan up on an infra (or show what would be applied), and clean up.

SkyPilot and the Kubernetes client are imported inside the commands, under the SkyPilot home that
sky/home.py chooses, so the rest of the CLI starts fast and a dry run never touches ~/.sky.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from worldtune.cli import console, emit_json, err_console, fail
from worldtune.tools.words.errors import WorldtuneError, require_extra

JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON for scripts")]
DbOpt = Annotated[str | None, typer.Option("--db", help="results database (default: $WORLDTUNE_DB or ~/.local/share)")]


def deploy(
    gpu: Annotated[str, typer.Option(help="GPU type: H200 or B200")] = "H200",
    plan: Annotated[str, typer.Option(help="plan string, e.g. cfg2-u4-hsdp8, tp8, 8x1gpu")] = "cfg2-u4-hsdp8",
    model: Annotated[str, typer.Option(help="cosmos3-super | cosmos3-nano | cosmos3-edge | ...")] = "cosmos3-super",
    infra: Annotated[str, typer.Option(help="nebius | lambda | slurm/NAME | kubernetes | local")] = "nebius",
    engine: Annotated[str, typer.Option(help="vllm-omni (real server) | twin (modelled GPUs)")] = "vllm-omni",
    capacity: Annotated[str, typer.Option(help="on-demand | spot | serverless")] = "on-demand",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="render and check; launch nothing")] = False,
    out: Annotated[str | None, typer.Option(help="write task.yaml / service.yaml / manifests/ here")] = None,
    yes: Annotated[bool, typer.Option("--yes", help="approve the spend without asking")] = False,
    time_scale: Annotated[float, typer.Option(help="twin only: divide its sleeps by K")] = 1.0,
    twin_profile: Annotated[str | None, typer.Option(help="twin only: profile YAML it runs with")] = None,
    image: Annotated[str | None, typer.Option(help="vLLM-Omni docker image (default: pinned release)")] = None,
    install: Annotated[
        str, typer.Option(help="docker | pip (pinned vllm-omni, vllm and torch on the host) | host (already there)")
    ] = "docker",
    model_path: Annotated[
        str | None,
        typer.Option(help="serve this checkpoint folder, already on the nodes, instead of downloading the model"),
    ] = None,
    server_env: Annotated[
        list[str] | None,
        typer.Option(help="KEY=VALUE in every server's environment (repeat): HF_HUB_OFFLINE=1, NCCL_*, PATH"),
    ] = None,
    spot_fallback: Annotated[bool, typer.Option(help="spot: fall back to on-demand if none")] = False,
    namespace: Annotated[str, typer.Option(help="Kubernetes namespace")] = "default",
    hours: Annotated[float, typer.Option(help="hours to keep it up once ready: what is committed; the autodown")] = 1.0,
    guardrails: Annotated[
        bool,
        typer.Option(
            "--guardrails/--no-guardrails",
            help="run Cosmos3's guardrails (vLLM-Omni's default; +~20 s at start and 2-18 s per clip); off by default, "
            "as the workload",
        ),
    ] = False,
    usd_per_hour: Annotated[
        float | None, typer.Option("--usd-per-hour", help="your own cluster's price per node-hour (slurm, kubernetes)")
    ] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Deploy a plan through SkyPilot (clouds, Slurm) or Kubernetes; --dry-run shows the task and its price."""
    from worldtune.sky import home
    from worldtune.sky.backend import render_options_for
    from worldtune.sky.catalog import write_catalog
    from worldtune.sky.k8s_manifests import K8sOptions
    from worldtune.sky.preview import is_skypilot_infra, write_preview
    from worldtune.tools.deployments.preview import build_deployment, preview
    from worldtune.tools.plans.offers import SNAPSHOT_FILE
    from worldtune.tools.plans.spend import check_commitment, check_hold_hours, quote
    from worldtune.tools.store.database import Store
    from worldtune.tools.store.db_path import check_out_folder, resolve_db_path

    try:
        if out:  # a dry run checks what the real one would write, before anything is written
            check_out_folder(out)
        check_hold_hours(hours)  # what the real deploy's quote refuses (negative, not finite, past 720 h)
        store = None if dry_run else Store(db)  # resolved before HOME may change for SkyPilot
        deployment = build_deployment(
            gpu,
            plan,
            model=model,
            infra=infra,
            engine=engine,
            capacity=capacity,
            time_scale=time_scale,
            twin_profile=twin_profile,
            guardrails=guardrails,
        )
        options = render_options_for(deployment).model_copy(
            update={
                "spot_fallback": spot_fallback,
                "install": install,
                "model_path": model_path,
                "server_env": server_environment(server_env or []),
                **({"image": image} if image else {}),
            }
        )
        options = type(options).model_validate(options.model_dump())
        if is_skypilot_infra(infra):  # local and Kubernetes leave SkyPilot's home alone
            require_extra(f"worldtune deploy --infra {infra}", "sky", "sky")  # before the catalog is written
            sky_home = home.chosen_home(dry_run)
            if sky_home is not None:
                write_catalog(sky_home, SNAPSHOT_FILE)
            home.import_skypilot(sky_home)
        k8s = K8sOptions(namespace=namespace, **({"image": image} if image else {}))
        if dry_run:  # the real deploy's quote and guardrails (own GPUs are not free; the caps), checked here too
            spend = quote(
                "deploy",
                gpu,
                deployment.plan,
                infra=infra,
                capacity=capacity,
                model=model,
                hours=hours,
                usd_per_hour=usd_per_hour,
            )
            existing = resolve_db_path(db)
            # against what is live in the database, if there is one: a dry run creates no database
            check_commitment(spend, Store(existing).list_deployments() if existing.is_file() else [], None)
        shown = preview(deployment, options, k8s)
    except (WorldtuneError, ValueError) as exc:
        raise fail(exc, as_json, {"gpu": gpu, "plan": plan, "infra": infra}) from exc

    files = [str(p) for p in write_preview(shown, Path(out))] if out else []
    if as_json and dry_run:
        emit_json({"dry_run": True, **shown.model_dump(mode="json"), "files": files})
        return
    if not as_json:
        _print_preview(shown, files)
    if dry_run:
        return
    assert store is not None
    from worldtune.tools.words.deploy_request import DeployRequest

    request = DeployRequest(
        gpu=gpu,
        plan=plan,
        infra=infra,
        engine=engine,
        capacity=capacity,
        model=model,
        hours=hours,
        usd_per_hour=usd_per_hour,
        time_scale=time_scale,
        twin_profile=twin_profile,
        guardrails=guardrails,
    )
    _launch(request, store, lambda: _backend(infra, store, k8s, options), yes=yes, as_json=as_json)


def _launch(request: Any, store: Any, backend_for: Callable[[], Any], *, yes: bool, as_json: bool) -> None:
    """Quote under the guardrails, ask (or take --yes), then build the backend, launch, and say where it is and
    how to tear it down."""
    from worldtune.tools.deployments import deploy as deploying

    where = {"gpu": request.gpu, "plan": request.plan, "infra": request.infra}
    try:  # the guardrails bind the command line as they bind MCP and the agent: refused before anything starts
        spend = deploying.quote_deploy(request, store)
    except (WorldtuneError, ValueError) as exc:
        raise fail(str(exc), as_json, where) from exc
    if spend.expected_usd > 0 and not yes:
        ask = f"${spend.usd_per_hour:.2f}/h for about {spend.expected_hours:.2f} h (${spend.expected_usd:.2f})"
        if not sys.stdin.isatty():
            raise fail(f"launching costs {ask}: pass --yes to approve", as_json)
        if not typer.confirm(f"Launch at {ask}?"):
            raise typer.Exit(1)

    def progress(message: str, fraction: float | None) -> None:
        if not as_json:
            err_console.print(f"[dim]{message}[/]")

    try:
        backend = backend_for()
        with contextlib.redirect_stdout(sys.stderr):  # SkyPilot prints to stdout; keep it for our output
            ready = deploying.deploy(request, store, progress, backend=backend)
    except (WorldtuneError, ValueError, RuntimeError, TimeoutError) as exc:
        raise fail(f"launch failed: {exc}", as_json) from exc
    if as_json:
        emit_json(ready.model_dump(mode="json"))
    else:
        console.print(f"[bold green]ready[/] {ready.id} on {ready.cluster}: " + ", ".join(ready.endpoints))
        console.print(f"tear down: worldtune gc --yes   (or keep it: it costs ${ready.usd_per_hour:.2f}/h)")


def server_environment(pairs: list[str]) -> dict[str, str]:
    """--server-env KEY=VALUE pairs as a dict; a malformed pair, or a secret's name (the API key and the Hugging Face
    token reach the servers as SkyPilot secrets, never as plain text in the task), is refused naming it."""
    import re

    from worldtune.sky.render import HF_TOKEN
    from worldtune.tools.words.deployment import API_KEY_ENV
    from worldtune.tools.words.errors import InvalidInput

    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise InvalidInput("server_env", key if sep else "(no =)", "KEY=VALUE, KEY a shell variable name")
        if key in (API_KEY_ENV, HF_TOKEN):
            raise InvalidInput("server_env", key, "not a secret", f"set ${key} in your environment: it is sent as one")
        env[key] = value
    return env


def _backend(infra: str, store: Any, k8s: Any, options: Any) -> Any:
    """The deploy capability's backend for `infra`, rendering with this command's options."""
    from worldtune.tools.deployments.deploy import backend_for
    from worldtune.tools.words.infra import Infra

    kind = Infra.parse(infra).kind
    return backend_for(infra, store, k8s if kind == "kubernetes" else None if kind == "local" else options)


def _print_preview(preview: Any, files: list[str]) -> None:
    from worldtune.sky.render import to_yaml

    d = preview.deployment
    console.print(f"[bold]{d.model} on {d.gpu}, plan {d.plan}, {d.engine} on {d.infra} ({d.capacity})[/]")
    if preview.task is not None:
        console.rule("SkyPilot " + ("service" if preview.kind == "skyserve-service" else "task"))
        console.print(to_yaml(preview.task), markup=False, highlight=False)
    if preview.manifests:
        console.rule(f"Kubernetes manifests ({len(preview.manifests)})")
        for obj in preview.manifests:
            console.print(f"{obj['kind']} {obj['metadata']['name']}", markup=False)
    console.rule("serve command per replica")
    for line in preview.serve_commands:
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    console.rule("cost")
    if preview.optimizer:
        o = preview.optimizer
        console.print(
            f"SkyPilot's optimizer picks {o.cloud} {o.region} {o.instance_type} ({o.accelerators}"
            f"{', spot' if o.use_spot else ''}) at ${o.usd_per_hour:.2f}/h",
            markup=False,
        )
    elif preview.kind == "kubernetes":  # a reference price, said as one
        console.print(preview.optimizer_note, markup=False)
    else:
        console.print(f"${preview.usd_per_hour:.2f}/h. {preview.optimizer_note}", markup=False)
    console.print(f"start-up allowance per replica: {preview.startup_allowance_s} s")
    if preview.cold_start_s is not None:
        console.print(f"cold start at zero replicas: ~{preview.cold_start_s:.0f} s (provisioning + model load)")
    if preview.validated_by:
        console.print("validated by: " + ", ".join(preview.validated_by))
    for path in files:
        console.print(f"wrote {path}")


def gc(
    yes: Annotated[bool, typer.Option("--yes", help="tear down without asking (else list only)")] = False,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Tear down everything whose owner (a run, or the command that deployed it) no longer heartbeats, and every
    deployment whose paid hours (`--hours`, MCP `hours`) have run out (tools/runs/lease.py)."""
    from worldtune.tools.runs import lease
    from worldtune.tools.runs.garbage import collect_garbage, dead_runs, garbage
    from worldtune.tools.store.database import Store

    store = Store(db)
    found = garbage(store)
    listed = {row.get("deployment_id") for row in found}
    expired = [
        {
            "cluster": d.cluster,
            "backend": str(d.infra),
            "deployment_id": d.id,
            "run_id": d.run_id,
            "state": d.state,
            "reason": f"its {d.hold_hours:g} h ran out",
        }
        for d in lease.expired(store)
        if d.id not in listed
    ]
    dead = [r["id"] for r in dead_runs(store)]
    if not yes:
        if as_json:
            emit_json({"would_tear_down": found + expired, "torn_down": [], "dead_runs": dead})
        else:
            for row in found + expired:
                why = f", {row['reason']}" if row.get("reason") else ""
                console.print(f"{row['cluster']} ({row['backend']}, state {row['state']}{why})")
            for run_id in dead:
                console.print(f"run {run_id} is marked running but its process is gone")
            console.print(f"{len(found) + len(expired)} to tear down; pass --yes to do it")
        return
    with contextlib.redirect_stdout(sys.stderr):
        done = collect_garbage(store, found)
        done += lease.expire(store)
    if as_json:
        emit_json({"would_tear_down": found + expired, "torn_down": done, "dead_runs": dead})
    else:
        for row in done:
            console.print(f"{row['cluster']}: {row['result']}")


def register(app: typer.Typer) -> None:
    """Add `deploy` and `gc` to the worldtune command line."""
    app.command()(deploy)
    app.command()(gc)
