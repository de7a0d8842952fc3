"""The SkyServe service of a planned fleet: render.py's service with the replica policy filled from the plan.

SkyServe runs one server per replica on its own node of the plan's world size, so a fleet node that runs
several servers becomes that many SkyServe replicas (their nodes are smaller: the price differs from the
fleet's node, which the capacity plan states). Mapped from the fleet's autoscaler:

- fixed N nodes: min = max = N x servers per node;
- SkyServe's QPS rule: its target per node over the servers per node, its delays;
- worldtune's queue-length rule: SkyServe services have no queue-length autoscaler (its pools do), so
  the nearest service policy is written: QPS at the servers' saturation (1 / service time) with the
  queue rule's delays. A documented gap, not the simulated rule.
- spot: `use_spot` with `base_ondemand_fallback_replicas` = the fleet's on-demand nodes x servers per node.

Kubernetes has no equivalent written here: an HPA on a queue metric needs a metrics adapter exporting the
servers' queue length (vLLM-Omni exposes no such gauge for Cosmos 3), so docs/capacity.md states the gap.
"""

from __future__ import annotations

from typing import Any

from worldtune.sky.render import RenderOptions, render_service
from worldtune.tools.words.deployment import Deployment
from worldtune.tools.words.fleet import Fleet


def render_fleet_service(
    fleet: Fleet, model: str = "cosmos3-super", engine: str = "vllm-omni", options: RenderOptions | None = None
) -> dict[str, Any]:
    """A SkyServe service config (validate with sky/dryrun.validate_task) for `fleet`.

    `options` must carry the model's cold load (the readiness probe's delay; tools/deployments/capacity.py fills it in);
    the replica policy is the fleet's, so the service time defaults to the fleet's own."""
    servers = fleet.servers_per_node
    plan = fleet.layout.single_replica().model_copy(update={"replicas": servers})
    deployment = Deployment(
        gpu=fleet.gpu,
        plan=str(plan),
        model=model,
        engine=engine,
        capacity="serverless",
        infra=fleet.offer_id.split("/")[0] or "nebius",
    )
    opts = options or RenderOptions()
    if opts.service_time_s is None:
        opts = opts.model_copy(update={"service_time_s": fleet.service_s})
    task = render_service(deployment, opts)
    auto = fleet.autoscaler
    policy: dict[str, Any] = {
        "min_replicas": auto.min_replicas * servers,
        "max_replicas": max(1, auto.max_replicas * servers),
        "upscale_delay_seconds": int(auto.upscale_delay_s),
        "downscale_delay_seconds": int(auto.downscale_delay_s),
    }
    if auto.policy != "fixed":
        per_server = (
            (auto.target_qps_per_replica / servers)
            if auto.policy == "qps" and auto.target_qps_per_replica
            else 1.0 / fleet.service_s
        )
        policy["target_qps_per_replica"] = float(f"{per_server:.3g}")
    if fleet.capacity == "spot":
        policy["base_ondemand_fallback_replicas"] = fleet.base_ondemand_fallback * servers
        task["resources"]["use_spot"] = True
    task["service"]["replica_policy"] = policy
    return task
