"""SkyPilot's own checks on a rendered task, offline: schema validation and an optimizer pass that names the offer.

`validate_task` runs `sky.Task.from_yaml_config` on a deep copy (it empties the dict it is given)
and refuses what SkyPilot refuses (typos, unknown keys, bad service sections). `optimize_task` asks
SkyPilot's optimizer which node it would rent and at what hourly price, the way SkyPilot's own unit
tests run it without credentials: the check for enabled clouds is replaced by the infra's cloud, and
the prices come from the catalog rows sky/catalog.py wrote into the SkyPilot home. Nothing here
provisions anything or leaves the machine.
"""

from __future__ import annotations

import contextlib
import copy
import io
from typing import Any
from unittest import mock

from pydantic import BaseModel

from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.infra import Infra

# Infra prefixes the offline optimizer can price (their catalog rows come from the snapshot).
OFFLINE_CLOUDS = ("nebius", "lambda")


class OptimizerChoice(BaseModel):
    """The node SkyPilot's optimizer picks for a task, and its price."""

    cloud: str
    region: str | None
    instance_type: str | None
    accelerators: str
    use_spot: bool
    usd_per_hour: float


def validate_task(config: dict[str, Any]) -> Any:
    """A `sky.Task` from a copy of `config`, or InvalidInput carrying SkyPilot's complaint."""
    import sky
    from sky import exceptions

    try:
        return sky.Task.from_yaml_config(copy.deepcopy(config))
    except (ValueError, exceptions.InvalidSkyPilotConfigError) as exc:
        raise InvalidInput("task", config.get("name", "?"), "a task SkyPilot 0.14 accepts", str(exc)) from exc


def optimize_task(config: dict[str, Any]) -> OptimizerChoice:
    """Run SkyPilot's optimizer on the task with its cloud treated as enabled; the cheapest feasible node."""
    from sky.utils import registry

    import sky
    from sky import exceptions, optimizer

    task = validate_task(config)
    infra = str(config.get("resources", {}).get("infra", ""))
    try:  # a rendered task's infra (nebius/eu-north1, slurm/NAME), read as every other module reads one
        cloud_name = Infra.parse(infra).name
    except InvalidInput:
        cloud_name = ""  # refused just below, naming the clouds the offline optimizer can price
    if cloud_name not in OFFLINE_CLOUDS:
        raise InvalidInput("infra", infra, f"an infra the offline optimizer can price: {', '.join(OFFLINE_CLOUDS)}")
    cloud = registry.CLOUD_REGISTRY.from_str(cloud_name)
    dag = sky.Dag()
    dag.add(task)
    sink = io.StringIO()
    try:
        with (
            mock.patch("sky.check.get_cached_enabled_clouds_or_refresh", return_value=[cloud]),
            contextlib.redirect_stdout(sink),
            contextlib.redirect_stderr(sink),
        ):
            dag = optimizer.Optimizer.optimize(dag, quiet=True)
    except exceptions.ResourcesUnavailableError as exc:
        raise InvalidInput("resources", config.get("resources"), "a node some catalog row offers", str(exc)) from exc
    best = dag.tasks[0].best_resources
    accelerators = ",".join(f"{k}:{v}" for k, v in (best.accelerators or {}).items())
    return OptimizerChoice(
        cloud=str(best.cloud).lower(),
        region=best.region,
        instance_type=best.instance_type,
        accelerators=accelerators,
        use_spot=bool(best.use_spot),
        usd_per_hour=round(float(best.get_cost(3600)), 4),
    )


def validate_manifests(manifests: list[dict[str, Any]]) -> list[str]:
    """Check Kubernetes manifests offline; returns the checks they passed, or raises InvalidInput naming the object.

    Built-in kinds go strictly against the official OpenAPI schema with kubernetes-validate when it is installed
    (`pip install kubernetes-validate`); a LeaderWorkerSet against the CRD schema shipped in sky/ (jsonschema).
    """
    import importlib.util
    import json
    from pathlib import Path

    import jsonschema

    checks: list[str] = []
    strict = importlib.util.find_spec("kubernetes_validate") is not None
    lws = [m for m in manifests if m.get("kind") == "LeaderWorkerSet"]
    if lws:
        schema = json.loads((Path(__file__).parent / "lws-crd-schema.json").read_text())
        for obj in lws:
            try:
                jsonschema.validate(obj, schema)
            except jsonschema.ValidationError as exc:
                raise InvalidInput(f"LeaderWorkerSet {obj['metadata']['name']}", exc.json_path, exc.message) from exc
        checks.append("LeaderWorkerSet CRD schema (jsonschema)")
    if strict:
        import kubernetes_validate

        version = kubernetes_validate.latest_version()
        for obj in manifests:
            pods = [obj]
            if obj.get("kind") == "LeaderWorkerSet":
                roles = obj["spec"]["leaderWorkerTemplate"]
                pods = [
                    {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": roles[r]}
                    for r in ("leaderTemplate", "workerTemplate")
                    if r in roles
                ]
            for pod in pods:
                try:
                    kubernetes_validate.validate(pod, version, strict=True)
                except kubernetes_validate.ValidationError as exc:
                    name = f"{obj['kind']} {obj['metadata']['name']}"
                    raise InvalidInput(name, str(list(exc.path)), exc.message) from exc
        checks.append(f"kubernetes-validate --strict (Kubernetes {version})")
    return checks
