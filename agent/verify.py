"""The `verify` node: one action on one candidate through MCP tools. Deploy (or replan a held node, or reuse a
live deployment), benchmark (or reuse a finished benchmark of the same action), watch the spending cap and
the engine while it runs, bill what it used. Idempotent: a run resumed after a crash never repeats a
finished measurement."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

from langgraph.runtime import Runtime

from worldtune.agent.claim_run import (
    full_run,
    lanes_to_launch_with_the_first,
    launch_early,
    launch_lanes,
    with_early,
    with_lanes_billed,
)
from worldtune.agent.configuration import Context, TuneOptions
from worldtune.agent.events import Deploying, Measured, Probing, Reused
from worldtune.agent.state import Outcome, VerifyTask
from worldtune.agent.steps import (
    Verification,
    bill,
    busy_model_s,
    cannot_measure,
    deploy_request,
    deploy_within,
    emit,
    engine_check,
    every_request_failed,
    failed_update,
    finished_benchmark,
    lease_hours,
    live_deployment,
    measured_figures,
    measurement_of,
    modelled_start_s,
    relaunched_start_s,
    replan,
    start_s,
    teardown,
)
from worldtune.agent.tools import BenchmarkRequest, Tools
from worldtune.agent.tools_client import ToolCallFailed
from worldtune.policies.search import PROBE_REPEATS, PROBE_WARMUP, Action, Candidate, believed_start_s, probe_steps
from worldtune.tools.mcp.results import ResultRecord
from worldtune.tools.words.deployment import Deployment
from worldtune.tools.words.goal import Goal
from worldtune.tools.words.workload import anchor_changes

POLL_S = 0.2  # how often a running benchmark is checked against its spending cap (wall seconds)
ENGINE_CHECK_S = 2.0  # how often its deployment is asked whether the engine still runs (wall seconds)


async def verify(task: VerifyTask, runtime: Runtime[Context]) -> dict[str, Any]:
    """One action on one candidate through MCP: deploy (or reuse), benchmark (or reuse a finished one), bill it."""
    tools: Tools = runtime.context.tools
    action, cand = task["action"], task["candidate"]
    price = cand.offer.usd_per_hour
    cap_s = task["cap_usd"] / price * 3600 if price > 0 else math.inf  # this action's share of the budget
    v = Verification(task, runtime, cap_s)

    # A measurement that completed before a crash, a signal or a teardown is in the database: use it (and bill
    # it), never run it again. Ones this run already used (an inconclusive candidate's repeat) do not count.
    used = task.get("used_benchmarks", [])
    earlier = await finished_benchmark(tools, task["run_id"], cand, kind=action.kind, used=used)
    if earlier is not None:
        return _in_round(task, await _recorded(runtime, task, cand, *earlier))
    # nodes for the claim's run that likely follows, launched now so that their start overlaps this probe
    early = None
    if action.kind == "probe" and action.early_lanes:
        early = asyncio.create_task(launch_early(v))
    # a claim's run on new nodes: its extra lanes start with its first node, not once it is up
    count = lanes_to_launch_with_the_first(task, cand, action)
    lanes = asyncio.create_task(launch_lanes(v, count)) if count else None
    try:
        started = await _started(v)
        if "deployment" in started:
            ahead = await lanes if lanes is not None else None
            update = await _benchmarked(v, started["deployment"], started["charged_s"], ahead, started["start"])
        else:  # a failed action: the deploy failed or starting it used this action's share
            update = started
            if lanes is not None:  # the lanes launched beside it are torn down, their starts billed
                launched = await lanes
                for got in launched:
                    if not isinstance(got, str):
                        await teardown(runtime, got[0].id)
                update = with_lanes_billed(update, cand, launched)
    except BaseException:
        for pending in (early, lanes):
            if pending is not None:
                pending.cancel()  # what it launched is the run's: finish (or gc) tears it down
        raise
    if early is not None or action.spares_held:
        launched = await early if early is not None else []
        update = with_early(cand, update, launched, action.spares_held, action.early_after_s)
    return _in_round(task, update)


def probe_request(goal: Goal) -> BenchmarkRequest:
    """A search's probe: a warm-up, then the probe's step counts (policies/search/words.probe_steps: a short one and
    the goal's), no full run, on the goal's workload where it differs from the model's anchor (what the search
    predicted); what policies/search/candidates.probe_seconds prices."""
    asked = probe_steps(goal.workload.steps)
    return BenchmarkRequest(
        steps=asked[0],
        repeats=PROBE_REPEATS,
        probe_steps=list(asked),
        warmup=PROBE_WARMUP,
        full=False,
        workload=anchor_changes(goal.workload),
    )


def _busy_s(options: TuneOptions, action: Action, wall_s: float) -> float:
    """GPU seconds of a benchmark that failed after `wall_s`: that on real GPUs; on the twin the scaled wall time,
    at most the action's modelled seconds (a loaded machine stretches the wall time, not the model's)."""
    return min(wall_s * options.time_scale, action.expected_s) if options.twin else wall_s


def _in_round(task: VerifyTask, update: dict[str, Any]) -> dict[str, Any]:
    """The update with its outcomes stamped by the round that asked for them (the time to answer overlaps a
    round's verifications: agent/state.answer_seconds)."""
    stamp = {"round": task["iteration"], "alongside": task["action"].rides}
    results = [r.model_copy(update=stamp) for r in update.get("results", [])]
    return update | ({"results": results} if "results" in update else {})


async def _started(v: Verification) -> dict[str, Any]:
    """A ready deployment for the candidate (live, replanned or new) and the GPU seconds its start cost, or the
    failed action's update."""
    task, runtime, cand, action, options, cap_s = v.task, v.runtime, v.cand, v.action, v.options, v.cap_s
    tools = v.tools
    scale = options.time_scale if options.twin else 1.0
    started = time.time()
    charged_s = 0.0
    start: tuple[float, float] | None = None  # a node this action started: its start measured and believed
    spare = task.get("spare_lanes") or {}
    deployment = await live_deployment(tools, task["deployment_id"], cand, task["run_id"], spare)
    if deployment is None and task["deployment_id"]:
        deployment = await replan(runtime, task["deployment_id"], cand, lease_hours(action, options, cap_s))
        if deployment is not None:
            charged_s += start_s(deployment, cand, options)
            start = (charged_s, believed_start_s(cand, node_held=True))  # a warm load, measured and believed
    if deployment is None:
        emit(runtime, Deploying(key=cand.key, plan=str(cand.plan), gpu=cand.gpu, infra=options.infra))
        request = deploy_request(cand, options, task, lease_hours(action, options, cap_s), "first")
        # real GPUs: stop a start that uses this action's share. The twin's start is modelled (and judged below);
        # its wall time is process starts that a loaded machine slows, never GPU time: its backend bounds it.
        timeout = None if options.twin or math.isinf(cap_s) else cap_s / scale + 30
        try:
            deployment = await deploy_within(runtime, request, timeout)
        except (ToolCallFailed, TimeoutError) as exc:
            spent_s = modelled_start_s(cand, options) if options.twin else time.time() - started
            return failed_update(action, cand, f"deploy failed: {exc}", bill(cand, min(cap_s, spent_s)))
        charged_s += start_s(deployment, cand, options)
        start = (charged_s, believed_start_s(cand))  # provisioning and a cold load, measured and believed
    if charged_s >= cap_s:
        await teardown(runtime, deployment.id)
        why = "stopped: starting it used this action's share of the budget"
        return failed_update(action, cand, why, bill(cand, cap_s), removed=True)
    return {"deployment": deployment, "charged_s": charged_s, "start": start}


async def _benchmarked(
    v: Verification,
    deployment: Deployment,
    charged_s: float,
    ahead: list[tuple[Deployment, float] | str] | None = None,
    start: tuple[float, float] | None = None,
) -> dict[str, Any]:
    """The action's benchmark on the deployment, watched against the cap and the engine, billed; its update. `ahead`:
    a claim's extra lanes, launched with its first node; `start`: the node's start (measured, believed) if this
    action started it, which the search learns its starts from before it sizes a claim's lanes."""
    task, runtime, cand, action, options, cap_s = v.task, v.runtime, v.cand, v.action, v.options, v.cap_s
    tools = v.tools
    goal = task["goal"]
    deployment_id = deployment.id
    kind = action.kind
    if kind == "full":  # the claim's run: over its lanes, checked as samples arrive (agent/claim_run.py)
        return await full_run(v, deployment, charged_s, ahead)
    request = probe_request(goal)
    emit(runtime, Probing(key=cand.key, deployment=deployment_id))
    try:
        status = await tools.start_benchmark(deployment_id, task["run_id"], request)
    except ToolCallFailed as exc:
        # the engine died, or its node was taken back, between its readiness and this benchmark (issue 56): this
        # action fails, billed its start, and the run goes on to its next decision, as a claim's lane does
        await teardown(runtime, deployment_id)
        why = f"benchmark refused: {exc}"
        return failed_update(action, cand, why, bill(cand, min(cap_s, charged_s)), removed=True)
    bench_id = status.id
    bench_started = looked = time.time()
    over = "stopped: this action reached its share of the budget"
    while status.status == "running":
        # Real GPUs bill wall time: stop the moment this action's share is used up.
        if not options.twin and charged_s + time.time() - bench_started >= cap_s:
            await teardown(runtime, deployment_id)
            return failed_update(action, cand, over, bill(cand, cap_s), removed=True)
        if time.time() - looked >= ENGINE_CHECK_S:  # an engine that died mid-benchmark never answers again
            looked = time.time()
            engine = await tools.get_deployment(deployment_id)
            if cannot_measure(engine.state, benchmark_running=True):
                spent_s = min(cap_s, charged_s + _busy_s(options, action, time.time() - bench_started))
                why = f"deployment {deployment_id} is {engine.state} during benchmark {bench_id}"
                return failed_update(action, cand, why, bill(cand, spent_s), removed=True)
        status = await tools.get_benchmark(bench_id, wait_s=POLL_S)
    wall_s = time.time() - bench_started
    if status.status != "completed":
        spent_s = min(cap_s, charged_s + _busy_s(options, action, wall_s))
        why = f"benchmark {bench_id} {status.status}: {status.error}"
        return failed_update(action, cand, why, bill(cand, spent_s))
    record = await tools.get_result(bench_id, include_samples=True)
    # The twin's GPU time is its modelled busy time (the slowest replica's sum of server times); the
    # HTTP and video-encoding overhead between requests, magnified by the time scale, is not.
    charged_s += busy_model_s(record) if options.twin else wall_s
    charged_s += (await relaunched_start_s(tools, deployment, cand, options))[0]
    if charged_s >= cap_s:  # a watchdog in model time would have stopped it here
        await teardown(runtime, deployment_id)
        return failed_update(action, cand, over, bill(cand, cap_s), removed=True)
    failure = every_request_failed(kind, record)
    if failure:  # e.g. the engine ran out of memory at the first request: a failed action with its reason
        return failed_update(action, cand, f"benchmark {bench_id}: {failure}", bill(cand, charged_s))
    return await _measured(runtime, cand, kind, bench_id, record, charged_s, deployment_id, live=True, start=start)


async def _measured(
    runtime: Runtime[Context],
    cand: Candidate,
    kind: str,
    bench_id: str,
    record: ResultRecord,
    charged_s: float,
    deployment_id: str,
    live: bool,
    start: tuple[float, float] | None = None,
) -> dict[str, Any]:
    """verify's update for one measurement: the result billed at `charged_s`, and the deployment if still live."""
    tools: Tools = runtime.context.tools
    measurement = measurement_of(cand, kind, bench_id, record)
    if start is not None:
        measurement = measurement.model_copy(update={"start_s": start[0], "start_predicted_s": start[1]})
    if kind == "full" and (measurement.failed_requests or len(measurement.latencies_s) < measurement.requested):
        measurement = measurement.model_copy(update={"engine_problem": await engine_check(tools, deployment_id)})
    usd, gpu_hours = bill(cand, charged_s)
    measurement = measurement.model_copy(update={"usd": usd, "gpu_hours": gpu_hours})
    emit(
        runtime,
        Measured(
            key=cand.key, kind=kind, usd=round(usd, 3), model_s=round(charged_s, 1), **measured_figures(measurement)
        ),
    )
    return {
        "results": [Outcome(measurement=measurement, deployment_id=deployment_id, model_s=charged_s)],
        "deployments": {cand.key: deployment_id} if live else {},
        "events": [f"{kind} {cand.key}: {measured_figures(measurement)} (${usd:.2f}, {charged_s:.0f} model-s)"],
    }


async def _recorded(
    runtime: Runtime[Context], task: VerifyTask, cand: Candidate, bench_id: str, deployment_id: str
) -> dict[str, Any]:
    """A benchmark of this action that completed in an attempt that never returned: measured and billed once.

    Its busy time was never billed, nor its deployment's start unless an earlier measurement of the run
    used that deployment (and so billed it).
    """
    tools: Tools = runtime.context.tools
    options = task["options"]
    emit(runtime, Reused(key=cand.key, benchmark=bench_id, deployment=deployment_id))
    record = await tools.get_result(bench_id, include_samples=True)
    deployment = await tools.get_deployment(deployment_id)
    bench = record.benchmark
    wall_s = (bench.finished_at or bench.started_at) - bench.started_at
    charged_s = busy_model_s(record) if options.twin else wall_s
    if deployment_id not in task.get("billed_deployments", []):
        charged_s += start_s(deployment, cand, options)
    live = deployment.state == "ready"
    return await _measured(runtime, cand, task["action"].kind, bench_id, record, charged_s, deployment_id, live)
