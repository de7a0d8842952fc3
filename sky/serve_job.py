"""The serve job of a SkyPilot deployment: how it is built, and how it is replaced under a new plan (replan).

A deployment is two SkyPilot steps: `sky.launch` provisions the cluster (and runs setup), then the servers
start as a `sky.exec` job of their own. Changing the plan in place keeps the first and redoes the second:
`sky.cancel` stops the serve job (its servers exit, the node and its page cache stay), and a new serve job
is submitted with `sky.exec` on the SAME cluster: no new `sky.launch`, no new provisioning, a warm load.
The ledger row, owner and commitment are the deployment's own and stay; each job submitted restarts the
cluster's autodown timer, the same bound as for the first serve job (sky/backend.py autodown_arguments).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from worldtune.sky.dryrun import validate_task
from worldtune.sky.launch import LaunchError, field_of, hard_down_minutes, launch_timeout_s
from worldtune.sky.render import cluster_name, render_task
from worldtune.tools.words.deployment import Deployment, Progress, replan_target, replanned
from worldtune.tools.words.errors import InvalidInput

if TYPE_CHECKING:
    from worldtune.sky.backend import SkyPilotBackend


def serve_task(backend: SkyPilotBackend, deployment: Deployment, config: dict[str, Any], handle: Any) -> Any:
    """The serve job's task: the rendered task without setup; on Slurm all but two of the node's CPUs
    (a job step takes all of the allocation by default; the benchmark job runs next to it)."""
    serve_config = {k: v for k, v in config.items() if k != "setup"}
    cpus = getattr(getattr(handle, "launched_resources", None), "cpus", None)
    if deployment.infra.kind == "slurm" and cpus:
        serve_config["resources"] = {**config["resources"], "cpus": max(1, int(float(str(cpus).rstrip("+"))) - 2)}
    return validate_task(backend.with_secrets(deployment, serve_config))


def record_serving(backend: SkyPilotBackend, cluster: str, deployment: Deployment, job_id: int) -> Deployment:
    """`deployment` loading under serve job `job_id`: said in the ledger, kept in its handle, saved."""
    backend.store.ledger_update(cluster, "loading", f"serve job {job_id}")
    handle = deployment.handle.model_copy(update={"serve_job": job_id})
    loading = deployment.model_copy(update={"state": "loading", "detail": f"serve job {job_id}", "handle": handle})
    backend.store.save_deployment(loading)
    return loading


def _handle(backend: SkyPilotBackend, cluster: str) -> Any:
    """The cluster's handle from SkyPilot's status (for its launched resources), None if it has none."""

    records = backend.result(backend.sky.status([cluster]))
    return field_of(records[0], "handle") if records else None


def replan(backend: SkyPilotBackend, deployment: Deployment, plan: str, progress: Progress | None) -> Deployment:
    """Cancel the serve job, submit one under `plan` on the same cluster, wait until its servers are ready.

    Refused before anything stops when the plan needs more GPUs than the node or the cluster is not open in
    the ledger; a new job that does not come up raises LaunchError (the caller tears the cluster down).
    """

    say: Progress = progress or (lambda message, fraction: None)
    new = replan_target(deployment, plan)
    allowance = launch_timeout_s()  # a bad setting is refused before the old job is stopped
    cluster = deployment.cluster or cluster_name(deployment)
    if not backend.store.ledger_open(cluster):
        raise InvalidInput("deployment_id", deployment.id, "a deployment whose cluster is still up", cluster)
    old_job = backend.serve_jobs.get(deployment.id) or deployment.handle.serve_job
    timer_hours = _launched_hours(backend, deployment)  # read before the target (with any new hours) is saved
    target = replanned(deployment, new).model_copy(update={"cluster": cluster})
    options = backend.options_for(target)
    config = render_task(target, options)  # rendered (and validated) before the old job is stopped
    validate_task(config)
    backend.store.ledger_update(cluster, "replanning", f"serve job {old_job} -> {new}")
    backend.store.save_deployment(target.model_copy(update={"detail": f"replanning from serve job {old_job}"}))
    started = time.time()
    if old_job is not None:
        backend.result(backend.sky.cancel(cluster, job_ids=[old_job]))
        say(f"{cluster}: serve job {old_job} ({deployment.plan}) cancelled; submitting {new}", 0.2)
    submitted = backend.sky.exec(serve_task(backend, target, config, _handle(backend, cluster)), cluster_name=cluster)
    job_id, _ = backend.result_within(submitted, allowance, f"serve job on {cluster}")
    if job_id is None:
        raise LaunchError(f"SkyPilot submitted no serve job on {cluster} for {new}")
    backend.serve_jobs[deployment.id] = int(job_id)
    if target.hold_hours is not None and target.hold_hours != timer_hours:
        _reset_autodown(backend, cluster, target, say)
    target = record_serving(backend, cluster, target, int(job_id))
    say(f"serve job {job_id} submitted on {cluster} after {time.time() - started:.0f} s; warm load", 0.4)
    local = backend.endpoints_of(cluster, target, options) if target.infra.kind == "slurm" else []
    backend.wait_ready(cluster, int(job_id), target, say, local)
    endpoints = backend.endpoints_of(cluster, target, options)
    ready = target.model_copy(
        update={"state": "ready", "ready_at": time.time(), "endpoints": endpoints, "loads": target.loads + 1}
    )
    backend.store.ledger_update(cluster, "ready", f"serve job {job_id}")
    backend.store.save_deployment(ready)
    say(f"ready under {new}: {', '.join(endpoints)}", 1.0)
    return ready


def _launched_hours(backend: SkyPilotBackend, deployment: Deployment) -> float | None:
    """The hours the cluster's autodown was last set for (the stored deployment's, before this replan)."""
    stored = backend.store.get_deployment(deployment.id)
    return None if stored is None else stored.hold_hours


def _reset_autodown(backend: SkyPilotBackend, cluster: str, target: Deployment, say: Progress) -> None:
    """A replan with new hours: the hard autodown is set again for them (sky.autostop, down, wait_for none).
    Should SkyPilot refuse, the old timer stands (it downs the cluster earlier, never later) and it is said."""

    if not backend.autodown:
        return
    from sky.skylet.autostop_lib import AutostopWaitFor

    minutes = hard_down_minutes(target, backend.allowance_s(target))
    try:
        backend.result(backend.sky.autostop(cluster, minutes, wait_for=AutostopWaitFor.NONE, down=True))
    except Exception as exc:  # the earlier, shorter timer still bounds the spend
        say(f"{cluster}: autodown not reset to {minutes} min ({type(exc).__name__}: {exc}); the old one stands", None)
        return
    say(f"{cluster}: autodown set to {minutes} min after this serve job ({target.hold_hours:g} h once ready)", None)
