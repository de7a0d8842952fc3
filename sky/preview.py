"""What a deploy would do, without spending: the Deployment, its offer, what it renders, SkyPilot's verdict.

`preview_deploy` is the typed core of `worldtune deploy --dry-run` (and of the first half of a real
deploy): given a checked Deployment (the deploy capability checks the plan and picks the offer:
tools/deployments/preview.py, which also fills in the model's numbers the rendering needs), it renders the
SkyPilot task (or the SkyServe service, or the Kubernetes manifests), has SkyPilot validate the task,
and, where the infra can be priced offline, asks SkyPilot's optimizer which node it would rent and its
price. `write_preview` writes what would be applied into a folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field

from worldtune.sky import render
from worldtune.sky.dryrun import OFFLINE_CLOUDS, OptimizerChoice
from worldtune.tools.words.deployment import Deployment
from worldtune.tools.words.infra import Infra
from worldtune.tools.words.offer import Offer


class DeployPreview(BaseModel):
    """Everything a deploy would apply, and what it would cost."""

    deployment: Deployment
    kind: str = Field(description="skypilot-task | skyserve-service | kubernetes | local")
    task: dict[str, Any] | None = None
    manifests: list[dict[str, Any]] = Field(default_factory=list)
    serve_commands: list[str]
    validated_by: list[str] = Field(default_factory=list, description="checks the rendered output passed")
    optimizer: OptimizerChoice | None = None
    optimizer_note: str = ""
    usd_per_hour: float = 0.0
    startup_allowance_s: int
    cold_start_s: float | None = Field(default=None, description="serverless: wait of a request at zero replicas")


def is_skypilot_infra(infra: str) -> bool:
    """Slurm clusters and clouds go through SkyPilot; local and Kubernetes do not."""
    return Infra.parse(infra).kind in ("slurm", "cloud")


def preview_deploy(
    deployment: Deployment,
    options: render.RenderOptions | None = None,
    k8s_options: Any = None,
    optimize: bool = True,
    reference_offer: Offer | None = None,
) -> DeployPreview:
    """Render and check what `deployment` would apply. SkyPilot must already be importable (sky/home.py).

    `options` must carry the model's cold load (and, for serverless, the service time): tools/deployments/preview.py
    fills them in. On Kubernetes `reference_offer` is the rented node the price is quoted from (None: no such
    offer), and `k8s_options` must carry the cold load too."""
    opts = options or render.RenderOptions()
    cold_load = render.cold_load_s(opts.cold_load_s)
    allowance = render.startup_allowance_s(deployment, cold_load)
    kind = Infra.parse(deployment.infra).kind
    if kind == "kubernetes":
        from worldtune.sky.k8s_manifests import K8sOptions

        kube = k8s_options or K8sOptions(cold_load_s=cold_load)
        return _preview_kubernetes(deployment, opts, kube, allowance, reference_offer)
    if kind == "local":
        return DeployPreview(
            deployment=deployment,
            kind="local",
            serve_commands=render.serve_commands(deployment, opts),
            startup_allowance_s=allowance,
        )
    from worldtune.sky.dryrun import optimize_task, validate_task

    task = render.render_task(deployment, opts)
    validate_task(task)
    validated = ["sky.Task.from_yaml_config"]
    choice: OptimizerChoice | None = None
    note = ""
    cloud = Infra.parse(deployment.infra).name  # nebius/eu-north1 -> nebius; slurm/NAME -> slurm
    if optimize and cloud in OFFLINE_CLOUDS:
        choice = optimize_task(task)
        validated.append("sky optimizer (offline catalog)")
    elif cloud == "slurm":
        note = "Slurm: priced at $0; the optimizer asks the live cluster at launch"
    else:
        note = f"{cloud}: no offline catalog rows; the optimizer runs at launch with your credentials"
    serverless = deployment.capacity == "serverless"
    if serverless:
        single = deployment.model_copy(update={"plan": deployment.plan.single_replica()})
        commands = render.serve_commands(single, opts.model_copy(update={"host": "0.0.0.0"}))
    else:
        commands = render.serve_commands(deployment, opts)
    price = choice.usd_per_hour if choice else deployment.usd_per_hour
    return DeployPreview(
        deployment=deployment.model_copy(update={"usd_per_hour": price}),
        kind="skyserve-service" if serverless else "skypilot-task",
        task=task,
        serve_commands=commands,
        validated_by=validated,
        optimizer=choice,
        optimizer_note=note,
        usd_per_hour=price,
        startup_allowance_s=allowance,
        cold_start_s=render.cold_start_s(deployment, cold_load) if serverless else None,
    )


def shell_text(argv: list[str]) -> str:
    """A container's command as a line of /bin/sh (serve-commands.sh): each argument quoted, and the kubelet's
    `$(VAR)` (expanded from the container's env, the API key's Secret) written as the shell's "$VAR": left as it is,
    /bin/sh would run a command named VAR."""
    import re
    import shlex

    def one(arg: str) -> str:
        found = re.fullmatch(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", arg)
        return f'"${found.group(1)}"' if found else shlex.quote(arg)

    return " ".join(one(a) for a in argv)


def _preview_kubernetes(
    deployment: Deployment, opts: render.RenderOptions, k8s_options: Any, allowance: int, reference: Offer | None
) -> DeployPreview:
    """Your own cluster: the manifests (validated offline), the same plan as a SkyPilot task for SkyPilot's
    Kubernetes support (task.yaml), and a reference price, since a cluster you run has no rental price."""
    import sys

    from worldtune.sky.dryrun import validate_manifests, validate_task
    from worldtune.sky.k8s_manifests import render_manifests

    manifests = render_manifests(deployment, k8s_options)
    validated = validate_manifests(manifests)
    task = render.render_task(deployment, opts)
    if "sky" in sys.modules:  # imported under its home by a caller that uses SkyPilot anyway (not the CLI)
        validate_task(task)
        validated.append("sky.Task.from_yaml_config (task.yaml, infra kubernetes)")
    else:
        validated.append("task.yaml (SkyPilot on Kubernetes) rendered, not checked by SkyPilot here")
    commands = [
        shell_text(c["command"])
        for m in manifests
        if m["kind"] == "Deployment"
        for c in m["spec"]["template"]["spec"]["containers"]
    ]
    plan = deployment.plan
    note = (
        f"your own cluster has no rental price; the same {plan.gpus}x{deployment.gpu} rent for "
        f"${reference.usd_per_hour:.2f}/h on {reference.id} ({reference.source}, as of {reference.as_of})"
        if reference
        else f"your own cluster has no rental price, and no offer in the snapshot rents {plan.gpus}x{deployment.gpu}"
    )
    price = reference.usd_per_hour if reference else 0.0
    return DeployPreview(
        deployment=deployment.model_copy(update={"usd_per_hour": price}),
        kind="kubernetes",
        task=task,
        manifests=manifests,
        serve_commands=commands,
        validated_by=validated,
        optimizer_note=note,
        usd_per_hour=price,
        startup_allowance_s=allowance,
    )


def write_preview(preview: DeployPreview, out: Path) -> list[Path]:
    """task.yaml (service.yaml for serverless) and, for Kubernetes, manifests/*.yaml; returns the files."""
    from worldtune.sky.k8s_manifests import manifest_filename

    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    if preview.task is not None:
        path = out / ("service.yaml" if preview.kind == "skyserve-service" else "task.yaml")
        path.write_text(render.to_yaml(preview.task))
        written.append(path)
    if preview.manifests:
        folder = out / "manifests"
        folder.mkdir(exist_ok=True)
        for obj in preview.manifests:
            path = folder / manifest_filename(obj)
            path.write_text(yaml.safe_dump(obj, sort_keys=False))
            written.append(path)
    commands = out / "serve-commands.sh"
    commands.write_text(
        "#!/bin/sh\n# one line per replica (worldtune deploy --dry-run)\n" + "\n".join(preview.serve_commands) + "\n"
    )
    written.append(commands)
    return written
