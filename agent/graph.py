"""The LangGraph control plane: goal -> candidates -> spend estimate -> approval -> verify -> learn -> decide -> finish.

Read top to bottom it is the flow of ARCHITECTURE.md: `prepare` lists offers (MCP) and ranks every
candidate with the performance model; `approve` shows the spend estimate and waits (interrupt) unless
--yes; `decide` asks the search policy for the next actions or the reason to stop; `verify` branches
(one per action, in parallel through Send) deploy, probe or run the full benchmark of the goal's workload through MCP
tools and bill what they used; `learn` folds the measurements in and recalibrates the belief; `finish`
tears down everything the run started and writes the record. Every node's side effects are idempotent
(a live deployment or a finished benchmark of the same candidate is reused), so a run resumed after a
crash never repeats a finished measurement.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.config import get_stream_writer
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Send, interrupt

from worldtune.agent.configuration import Context, TuneOptions
from worldtune.agent.state import TuneInput, TuneOutput, TuneState, VerifyTask
from worldtune.agent.tools_client import ToolCallFailed
from worldtune.policies import search as ws
from worldtune.tools.goal import Goal
from worldtune.tools.offer import Offer
from worldtune.tools.plan import Plan
from worldtune.tools.workload import anchor_changes

POLL_S = 0.2  # how often a running benchmark is checked against its spending cap (wall seconds)
ENGINE_CHECK_S = 2.0  # how often its deployment is asked whether the engine still runs (wall seconds)


def _emit(runtime: Runtime[Context], event: str, **data: Any) -> None:
    """Progress for people: to the stream (stream_mode 'custom') and the runner's printer."""
    with contextlib.suppress(RuntimeError):  # outside a streaming run there is no writer
        get_stream_writer()({"event": event, **data})
    runtime.context.progress(event, data)


def _options(state: TuneState | VerifyTask) -> TuneOptions:
    return TuneOptions.model_validate(state["options"])


# ---- nodes -----------------------------------------------------------------------------------------
async def read_goal(state: TuneState, config: RunnableConfig) -> dict[str, Any]:
    """A run started with only the goal text (Studio, `langgraph dev`) reads it here as `tune` does; the runner
    has done this before the graph starts, and the node passes its state on untouched."""
    if state.get("goal"):
        return {}
    from worldtune.agent.runner import first_state, goal_for
    from worldtune.tools.spend import needs_confirmation

    raw = dict(state.get("options") or {})
    options = TuneOptions.model_validate(raw)
    if "yes" not in raw:  # as start_tuning does: a free run (the local twin) needs no approval, a paid one asks
        options = options.model_copy(update={"yes": not needs_confirmation(options.infra, options.engine)})
    run_id = state.get("run_id") or str(config.get("configurable", {}).get("thread_id") or "")
    parsed = await asyncio.to_thread(goal_for, state.get("goal_text", ""), options)
    first = await asyncio.to_thread(first_state, parsed, options, run_id or f"studio-{int(time.time())}")
    return {k: v for k, v in first.items() if k != "results"}


async def prepare(state: TuneState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Offers (MCP list_offers) x valid plans, ranked by the performance model under the goal; a spend estimate."""
    goal = Goal.model_validate(state["goal"])
    options = _options(state)
    listed = await runtime.context.tools.call("list_offers", capacity=None)
    offers = [Offer.model_validate({k: v for k, v in o.items() if k in Offer.model_fields}) for o in listed["offers"]]
    search = ws.initial_state(goal, offers).model_copy(update={"reuse_nodes": options.reuse_nodes})
    ranked = ws.candidates(search)
    feasible = [c for c in ranked if c.feasible]
    plan, lanes_why = ws.lanes_for_deadline(search, options.parallel, options.reuse_nodes)
    usd, gpu_hours, keys = plan.usd, plan.gpu_hours, plan.keys
    estimate = {
        "parallel": plan.parallel,
        "usd": round(usd, 2),
        "gpu_hours": round(gpu_hours, 2),
        "answer_hours": round(plan.answer_s / 3600.0, 2),
        "deployments": plan.deployments,
        "cold_loads": plan.cold_loads,
        "warm_loads": plan.warm_loads,
        "estimate_basis": plan.basis,
        "budget_usd": goal.budget_usd,
        "candidates": len(ranked),
        "feasible": len(feasible),
        "first_to_verify": keys[:5],
        "engine": options.engine,
        "infra": options.infra,
        "priced_as": "the offers' prices for the modelled GPU time (twin rehearsal)" if options.twin else "the offers",
    }
    if lanes_why:  # a deadline bought lanes, or could not
        estimate["parallel_why"] = lanes_why
    top = [f"{c.plan} on {c.offer.id}: {c.usd_per_clip:.3f} $/clip, p50 {c.latency_s:.0f} s" for c in feasible[:3]]
    _emit(runtime, "candidates", count=len(ranked), feasible=len(feasible), top=top, estimate=estimate)
    return {
        "search": search.model_dump(mode="json"),
        "initial_beliefs": {g: p.model_dump(mode="json") for g, p in search.beliefs.items()},
        "spend_estimate": estimate,
        "learned": 0,
        # a deadline may buy lanes: every node after this one (decide, the answer's time) runs with them
        "options": {**dict(state.get("options") or {}), "parallel": plan.parallel},
        "events": [f"{len(ranked)} candidates ({len(feasible)} predicted to meet the goal); expect ${usd:.2f}"]
        + ([lanes_why] if lanes_why else []),
    }


async def approve(state: TuneState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Ask before spending (interrupt), unless the run was started with --yes."""
    if _options(state).yes:
        return {"approved": True, "events": ["spend approved by --yes"]}
    from worldtune.agent.runner import mark_approved, mark_waiting  # the record's layout lives with the runner

    db_path = _options(state).db_path
    # recorded here, so a run that Studio / `langgraph dev` drives says it waits, as one `tune` drives does (the
    # node runs again on resume: the record says waiting until the answer is in, then running again)
    await asyncio.to_thread(mark_waiting, state["run_id"], state["spend_estimate"], db_path)
    answer = interrupt(
        {
            "question": "Approve this spend?",
            "goal": Goal.model_validate(state["goal"]).describe(),
            "spend_estimate": state["spend_estimate"],
            "thread_id": state["run_id"],
        }
    )
    approved = bool(answer.get("approved")) if isinstance(answer, dict) else bool(answer)
    if not approved:
        return {
            "approved": False,
            "stop_reason": "declined: the spend estimate was not approved",
            "stop_kind": "declined",
            "events": ["spend declined"],
        }
    await asyncio.to_thread(mark_approved, state["run_id"], db_path)
    return {"approved": True, "events": ["spend approved"]}


async def decide(state: TuneState, runtime: Runtime[Context]) -> dict[str, Any]:
    """The search policy's next actions (at most --parallel), or why to stop; tear down what is not needed."""
    options = _options(state)
    live = dict(state.get("deployments") or {})
    search = ws.SearchState.model_validate(state["search"]).model_copy(update={"deployed": list(live)})
    decision = ws.decide(
        search, parallel=options.parallel, margin=options.margin, max_iterations=options.max_iterations
    )
    keep = {a.key for a in decision.actions if not a.redeploy}  # a retry gets a fresh deployment
    spare = {k: d for k, d in live.items() if k not in keep}
    moved = _reused_nodes(decision.actions, spare) if options.reuse_nodes else {}
    removed: dict[str, str] = {}
    for key, deployment_id in live.items():
        if key not in keep:
            if deployment_id not in moved.values():  # a node no longer needed is released at once
                await _teardown(runtime, deployment_id)
            removed[key] = ""
    for key, deployment_id in moved.items():
        _emit(runtime, "keep_node", key=key, deployment=deployment_id)
    update: dict[str, Any] = {"decision": decision.model_dump(mode="json"), "deployments": removed | moved}
    if decision.stop_reason:
        _emit(runtime, "stop", reason=decision.stop_reason, kind=decision.stop_kind)
        update |= {"stop_reason": decision.stop_reason, "stop_kind": decision.stop_kind or ""}
        update["events"] = [f"stop: {decision.stop_reason}"]
    else:
        for a in decision.actions:
            _emit(runtime, "next", kind=a.kind, key=a.key, reason=a.reason, expected_usd=round(a.expected_usd, 2),
                  value=round(a.value, 5), requests=a.requests)  # fmt: skip
        update["events"] = [f"next: {a.kind} {a.key} ({a.reason})" for a in decision.actions]
    return update


def _reused_nodes(actions: list[ws.Action], spare: dict[str, str]) -> dict[str, str]:
    """Candidate key -> a live deployment on the same offer that is no longer needed as it is: its node is kept
    and its plan changed in place (replan) instead of a new deployment with its provisioning and cold load."""
    moved: dict[str, str] = {}
    for a in actions:
        if a.redeploy or not a.needs_deploy:
            continue
        offer = a.key.split("|", 1)[0]
        old = next((k for k in spare if k.split("|", 1)[0] == offer), None)
        if old is not None:
            moved[a.key] = spare.pop(old)
    return moved


async def verify(task: VerifyTask, runtime: Runtime[Context]) -> dict[str, Any]:
    """One action on one candidate through MCP: deploy (or reuse), benchmark (or reuse a finished one), bill it."""
    tools = runtime.context.tools
    options = _options(task)
    goal = Goal.model_validate(task["goal"])
    action = ws.Action.model_validate(task["action"])
    cand = ws.Candidate.model_validate(task["candidate"])
    run_id = task["run_id"]
    scale = options.time_scale if options.twin else 1.0
    price = cand.offer.usd_per_hour
    charged_s = 0.0
    cap_s = task["cap_usd"] / price * 3600 if price > 0 else math.inf  # this action's share of the budget
    started = time.time()

    # A measurement that completed before a crash, a signal or a teardown is in the database: use it (and bill
    # it), never run it again. Ones this run already used (an inconclusive candidate's repeat) do not count.
    earlier = await _finished_benchmark(tools, run_id, cand, kind=action.kind, used=task.get("used_benchmarks", []))
    if earlier is not None:
        return await _recorded(runtime, task, cand, *earlier)

    deployment = await _live_deployment(tools, task["deployment_id"], cand, run_id)
    if deployment is None and task["deployment_id"]:
        deployment = await _replan(runtime, task["deployment_id"], cand, _lease_hours(action, options, cap_s))
        if deployment is not None:
            charged_s += _start_s(deployment, cand, options)
    if deployment is None:
        _emit(runtime, "deploy", key=cand.key, plan=cand.plan, gpu=cand.gpu, infra=options.infra)
        arguments: dict[str, Any] = {
            "gpu": cand.gpu,
            "plan": cand.plan,
            "infra": options.infra,
            "engine": options.engine,
            "capacity": cand.capacity,
            "model": goal.workload.model,
            "twin_profile": None,
            "time_scale": options.time_scale if options.twin else None,
            "hours": _lease_hours(action, options, cap_s),
            "run_id": run_id,
            "confirm": True,
        }
        try:
            outcome = await _deploy(runtime, cand, arguments, options.twin_profiles(), None if math.isinf(cap_s)
                                    else cap_s / scale + 30)  # fmt: skip
        except (ToolCallFailed, TimeoutError) as exc:
            spent_s = min(cap_s, (time.time() - started) * scale)
            return _failed(task, cand, f"deploy failed: {exc}", _bill(cand, spent_s))
        deployment = outcome["deployment"]
        charged_s += _start_s(deployment, cand, options)
    deployment_id = str(deployment["id"])
    if charged_s >= cap_s:
        await _teardown(runtime, deployment_id)
        return _failed(
            task, cand, "stopped: starting it used this action's share of the budget", _bill(cand, cap_s), removed=True
        )

    kind = action.kind
    replicas = Plan.parse(cand.plan).replicas
    if kind == "probe":
        args = {"steps": ws.PROBE_STEPS[0], "repeats": ws.PROBE_REPEATS, "concurrency": [1],
                "probe_steps": list(ws.PROBE_STEPS)}  # fmt: skip
        args["warmup"] = 1
    else:
        repeats = max(1, math.ceil((action.requests or ws.full_requests(goal)) / replicas))
        args = {"steps": goal.workload.steps, "repeats": repeats, "concurrency": [replicas], "probe_steps": []}
        args["warmup"] = 0
    # The goal's workload (where it differs from the model's anchor) is what the search predicted: measure it.
    args.update(anchor_changes(goal.workload))
    _emit(runtime, kind, key=cand.key, deployment=deployment_id)
    status = await tools.call("start_benchmark", deployment_id=deployment_id, run_id=run_id, **args)
    bench_id = str(status["id"])
    bench_started = looked = time.time()
    while status.get("status") == "running":
        # Real GPUs bill wall time: stop the moment this action's share is used up.
        if not options.twin and charged_s + time.time() - bench_started >= cap_s:
            await _teardown(runtime, deployment_id)
            return _failed(
                task, cand, "stopped: this action reached its share of the budget", _bill(cand, cap_s), removed=True
            )
        if time.time() - looked >= ENGINE_CHECK_S:  # an engine that died mid-benchmark never answers again
            looked = time.time()
            engine = await tools.call("get_deployment", deployment_id=deployment_id)
            if engine.get("state") not in ("ready", "loading"):
                spent_s = min(cap_s, charged_s + (time.time() - bench_started) * scale)
                why = f"deployment {deployment_id} is {engine.get('state')} during benchmark {bench_id}"
                return _failed(task, cand, why, _bill(cand, spent_s), removed=True)
        status = await tools.call("get_benchmark", benchmark_id=bench_id, wait_s=POLL_S)
    wall_s = time.time() - bench_started
    if status.get("status") != "completed":
        spent_s = min(cap_s, charged_s + wall_s * scale)
        return _failed(
            task, cand, f"benchmark {bench_id} {status.get('status')}: {status.get('error')}", _bill(cand, spent_s)
        )
    record = await tools.call("get_result", benchmark_id=bench_id, include_samples=True)
    # The twin's GPU time is its modelled busy time (the slowest replica's sum of server times); the
    # HTTP and video-encoding overhead between requests, magnified by the time scale, is not.
    charged_s += _busy_model_s(record) if options.twin else wall_s
    if charged_s >= cap_s:  # a watchdog in model time would have stopped it here
        await _teardown(runtime, deployment_id)
        return _failed(
            task, cand, "stopped: this action reached its share of the budget", _bill(cand, cap_s), removed=True
        )
    failure = _every_request_failed(kind, record)
    if failure:  # e.g. the engine ran out of memory at the first request: a failed action with its reason
        return _failed(task, cand, f"benchmark {bench_id}: {failure}", _bill(cand, charged_s))
    return await _measured(runtime, cand, kind, bench_id, record, charged_s, deployment_id, live=True)


async def _measured(
    runtime: Runtime[Context],
    cand: ws.Candidate,
    kind: str,
    bench_id: str,
    record: dict[str, Any],
    charged_s: float,
    deployment_id: str,
    live: bool,
) -> dict[str, Any]:
    """verify's update for one measurement: the result billed at `charged_s`, and the deployment if still live."""
    tools = runtime.context.tools
    measurement = _measurement(cand, kind, bench_id, record)
    if kind == "full" and (measurement.failed_requests or len(measurement.latencies_s) < measurement.requested):
        measurement = measurement.model_copy(update={"engine_problem": await _engine_check(tools, deployment_id)})
    usd, gpu_hours = _bill(cand, charged_s)
    measurement = measurement.model_copy(update={"usd": usd, "gpu_hours": gpu_hours})
    _emit(
        runtime,
        "measured",
        key=cand.key,
        kind=kind,
        usd=round(usd, 3),
        model_s=round(charged_s, 1),
        **_measured_figures(measurement),
    )
    return {
        "results": [{**measurement.model_dump(mode="json"), "deployment_id": deployment_id, "model_s": charged_s}],
        "deployments": {cand.key: deployment_id} if live else {},
        "events": [f"{kind} {cand.key}: {_measured_figures(measurement)} (${usd:.2f}, {charged_s:.0f} model-s)"],
    }


async def _recorded(
    runtime: Runtime[Context], task: VerifyTask, cand: ws.Candidate, bench_id: str, deployment_id: str
) -> dict[str, Any]:
    """A benchmark of this action that completed in an attempt that never returned: measured and billed once.

    Its busy time was never billed, nor its deployment's start unless an earlier measurement of the run
    used that deployment (and so billed it).
    """
    tools = runtime.context.tools
    options = _options(task)
    _emit(runtime, "reuse", key=cand.key, benchmark=bench_id, deployment=deployment_id)
    record = await tools.call("get_result", benchmark_id=bench_id, include_samples=True)
    deployment = await tools.call("get_deployment", deployment_id=deployment_id)
    bench = record.get("benchmark") or {}
    wall_s = float(bench.get("finished_at") or bench.get("started_at") or 0.0) - float(bench.get("started_at") or 0.0)
    charged_s = _busy_model_s(record) if options.twin else wall_s
    if deployment_id not in task.get("billed_deployments", []):
        charged_s += _start_s(deployment, cand, options)
    live = deployment.get("state") == "ready"
    return await _measured(runtime, cand, ws.Action.model_validate(task["action"]).kind, bench_id, record, charged_s,
                     deployment_id, live)  # fmt: skip


def _start_s(deployment: dict[str, Any], cand: ws.Candidate, options: TuneOptions) -> float:
    """GPU seconds a deployment's start costs: provisioning (modelled on the local twin) and the model load.

    A replanned deployment (same node, new plan) pays only its warm load, from the restart on."""
    scale = options.time_scale if options.twin else 1.0
    replanned = deployment.get("replanned_at")
    began = replanned or deployment["created_at"]
    load_s = ((deployment.get("ready_at") or time.time()) - began) * scale
    if options.twin:  # a local process start, magnified by the time scale, is not GPU time: cap it
        load_s = min(load_s, 2 * (cand.load_s if replanned else cand.cold_load_s or cand.load_s))
    provision_s = cand.offer.provision_s if options.infra == "local" and not replanned else 0.0
    return float(provision_s + load_s)


def _lease_hours(action: ws.Action, options: TuneOptions, cap_s: float) -> float:
    """The hours a deployment (or a replanned node) is asked for: this action's modelled seconds with half again
    as margin, at least --hold-hours, at most its share of the budget: on SkyPilot they are the cluster's hard
    autodown, so fewer would cut a long full run short. The twin's lease is wall time (tools/lease.py): the
    modelled seconds are divided by its time scale."""
    scale = options.time_scale if options.twin else 1.0
    hours = max(options.hold_hours, 1.5 * action.expected_s / scale / 3600.0)
    if math.isfinite(cap_s):
        hours = min(hours, max(options.hold_hours, cap_s / scale / 3600.0))
    return round(hours, 4)


async def _replan(
    runtime: Runtime[Context], deployment_id: str, cand: ws.Candidate, hours: float
) -> dict[str, Any] | None:
    """The node of a live deployment on this candidate's offer, restarted under its plan (MCP replan_deployment);
    None when it is not ready or the replan failed (its node is then torn down) and a fresh deployment is due."""
    tools = runtime.context.tools
    try:
        current = await tools.call("get_deployment", deployment_id=deployment_id)
    except ToolCallFailed:
        return None
    if current.get("state") != "ready" or current.get("gpu") != cand.gpu:
        return None
    _emit(runtime, "replan", key=cand.key, deployment=deployment_id, plan=cand.plan, previous=current.get("plan"))
    try:
        outcome = await tools.call(
            "replan_deployment", deployment_id=deployment_id, plan=cand.plan, confirm=True, hours=hours
        )
    except ToolCallFailed as exc:
        _emit(runtime, "replan", key=cand.key, deployment=deployment_id, note=str(exc))
        return None
    return dict(outcome["deployment"])


async def learn(state: TuneState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Fold new measurements into the search and recalibrate the belief of each GPU type measured."""
    search = ws.SearchState.model_validate(state["search"])
    results = state.get("results") or []
    done = state.get("learned", 0)
    fresh = results[done:]
    gpus: set[str] = set()
    events: list[str] = []
    for raw in fresh:
        m = ws.Measurement.model_validate({k: v for k, v in raw.items() if k in ws.Measurement.model_fields})
        if raw.get("failed"):
            search = ws.record_failure(search, m.key, m.usd, m.gpu_hours, str(raw.get("error") or "failed"))
            events.append(f"{m.key}: {raw.get('error')}")
            # people see why (a load that ran out of memory, every request failing), not only that money went
            _emit(runtime, "failed", key=m.key, error=str(raw.get("error"))[:600])
            continue
        rejected = len(search.rejected)
        search = ws.record(search, m, recalibrate=False)
        if len(search.rejected) > rejected:
            r = search.rejected[-1]
            then = "retry on a fresh deployment" if m.key in search.retry else f"failed: {search.failures.get(m.key)}"
            events.append(f"rejected {r.kind} {m.key} (benchmark {r.benchmark_id}): {r.reason}; {then}")
            _emit(runtime, "rejected", key=m.key, reason=r.reason, then=then)
            continue
        gpus.add(ws.hardware_key(m.key).split(":")[0])
    for gpu in sorted(gpus):
        search = ws.recalibrated(search, gpu)
        post = search.posterior(gpu)
        note = (
            f"recalibrated {gpu}: posterior from {post.observations} observations (model error "
            f"{post.model_error:.2%}, {len(post.alternatives) + 1} explanation(s), the MAP's weight "
            f"{post.weight:.0%}): {post.summary()}"
        )
        events.append(note)
        _emit(runtime, "learned", gpu=gpu, note=note, spent_usd=round(search.spent_usd, 2))
    # time to a verified answer so far (modelled on the twin): the verifications' seconds, lanes overlapping
    answer_s = sum(float(r.get("model_s", 0.0)) for r in results) / _options(state).parallel
    search = search.model_copy(update={"elapsed_s": answer_s})  # what a goal's 'answer within' is held to
    _emit(runtime, "elapsed", answer_hours=round(answer_s / 3600.0, 3), measurements=len(results))
    live = {r["key"]: "" for r in fresh if r.get("removed")}
    return {"search": search.model_dump(mode="json"), "learned": len(results), "events": events, "deployments": live}


async def finish(state: TuneState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Tear down everything the run started (also what a crashed attempt left) and write the record."""
    tools = runtime.context.tools
    run_id = state["run_id"]
    listed = await tools.call("list_deployments", run_id=run_id, alive_only=True)
    for d in listed.get("deployments", []):
        await _teardown(runtime, str(d["id"]))
    from worldtune.agent.runner import build_summary, write_record  # the record's layout lives with the runner

    summary = build_summary(state, await tools.call("list_deployments", run_id=run_id))
    # written here, so a run that Studio / `langgraph dev` drives (no runner around it) ends completed too
    await asyncio.to_thread(write_record, run_id, summary, _options(state).db_path)
    _emit(runtime, "done", stop_reason=summary["stop_reason"], recommendation=summary["recommendation"])
    cleared = {k: "" for k in (state.get("deployments") or {})}
    return {"summary": summary, "deployments": cleared, "events": ["torn down; record written"]}


# ---- small pieces the nodes share ------------------------------------------------------------------
async def _deploy(
    runtime: Runtime[Context], cand: ws.Candidate, arguments: dict[str, Any], profiles: list[str], timeout: float | None
) -> dict[str, Any]:
    """Deploy with the rehearsal profile for this GPU type: each given file in turn until the deploy tool accepts
    one (it refuses a profile for another GPU type; the agent never opens the files); none fits: the shipped one."""
    tools = runtime.context.tools
    for path in profiles:
        try:
            return dict(await asyncio.wait_for(tools.call("deploy", **{**arguments, "twin_profile": path}), timeout))
        except ToolCallFailed as exc:
            if "twin_profile" not in str(exc):
                raise
            _emit(runtime, "deploy", key=cand.key, note=f"twin profile {path} not for {cand.gpu}: {exc}")
    return dict(await asyncio.wait_for(tools.call("deploy", **{**arguments, "twin_profile": None}), timeout))


async def _teardown(runtime: Runtime[Context], deployment_id: str) -> None:
    try:
        await runtime.context.tools.call("teardown", deployment_id=deployment_id, confirm=True)
        _emit(runtime, "teardown", deployment=deployment_id)
    except ToolCallFailed as exc:  # already gone or unknown: nothing left to stop
        _emit(runtime, "teardown", deployment=deployment_id, note=str(exc))


async def _live_deployment(tools: Any, known: str | None, cand: ws.Candidate, run_id: str) -> dict[str, Any] | None:
    """A ready deployment of this candidate: the one the state names, or one a crashed attempt left running."""
    ids = [known] if known else []
    listed = await tools.call("list_deployments", run_id=run_id, alive_only=True)
    ids += [
        str(d["id"])
        for d in listed.get("deployments", [])
        if d["gpu"] == cand.gpu and d["plan"] == cand.plan and d["capacity"] == cand.capacity
    ]
    for deployment_id in ids:
        try:
            current = await tools.call("get_deployment", deployment_id=deployment_id)
        except ToolCallFailed:
            continue
        if current.get("state") == "ready" and current.get("plan") == cand.plan:  # a held node of another plan:
            return dict(current)  # not this candidate's until replanned
    return None


async def _finished_benchmark(
    tools: Any, run_id: str, cand: ws.Candidate, kind: str, used: list[str]
) -> tuple[str, str] | None:
    """(benchmark, deployment) of a completed benchmark of this kind on any deployment of this candidate in the
    run that the run has not used yet (one a crashed or stopped attempt finished): reused, never repeated."""
    deployments = await tools.call("list_deployments", run_id=run_id)
    # A deployment's plan is its current one: a benchmark it ran before a replan measured another plan.
    mine = {
        str(d["id"]): float(d.get("replanned_at") or 0.0)
        for d in deployments.get("deployments", [])
        if d["gpu"] == cand.gpu and d["plan"] == cand.plan and d["capacity"] == cand.capacity
    }
    listed = await tools.call("list_results", run_id=run_id, limit=1000)
    for row in reversed(listed.get("results", [])):  # oldest first
        if row.get("deployment_id") not in mine or row.get("status") != "completed":
            continue
        if float(row.get("started_at") or 0.0) < mine[str(row["deployment_id"])]:
            continue
        if row["benchmark_id"] in used:
            continue
        record = await tools.call("get_result", benchmark_id=row["benchmark_id"])
        probes = (record.get("config") or {}).get("probe_steps") or []
        if (kind == "probe") == bool(probes):
            return str(row["benchmark_id"]), str(row["deployment_id"])
    return None


def _measurement(cand: ws.Candidate, kind: str, bench_id: str, record: dict[str, Any]) -> ws.Measurement:
    result = (record.get("benchmark") or {}).get("result") or {}
    if kind == "probe":
        fit = result.get("fit") or {}
        return ws.Measurement(
            key=cand.key,
            kind="probe",
            per_step_s=fit.get("per_step_s"),
            fixed_s=fit.get("fixed_s"),
            benchmark_id=bench_id,
            repeats=max(1, int((record.get("config") or {}).get("repeats") or 1)),
        )
    samples = [s for s in record.get("samples") or [] if s.get("phase") == "full"]
    # The server's own time when it reports one (the stage time published figures use), else the client's.
    latencies = [
        float(s["server_time_s"] if s.get("server_time_s") is not None else s["latency_s"])
        for s in samples
        if s.get("ok")
    ]
    config = record.get("config") or {}
    # the benchmark sends `repeats` full requests per client at every concurrency level
    requested = sum(int(c) * int(config.get("repeats") or 0) for c in config.get("concurrency") or [])
    return ws.Measurement(
        key=cand.key,
        kind="full",
        latencies_s=latencies,
        benchmark_id=bench_id,
        requested=max(requested, len(samples)),
        failed_requests=sum(1 for s in samples if not s.get("ok")),
        contaminated=sum(1 for s in samples if _waited_behind_others(s)),
    )


def _waited_behind_others(sample: dict[str, Any]) -> bool:
    """An answer sent with nothing of ours ahead on its endpoint whose server time exceeds its own forward pass
    (the stage durations the server reports) by more than half a clip: it queued at the server behind load
    that was not this benchmark's. The client's latency is not used: on a busy machine, or through a twin's
    time scale, the client's own overhead would read as queueing."""
    server, stages = sample.get("server_time_s"), sample.get("stage_durations") or {}
    if not sample.get("ok") or server is None or int(sample.get("queue_ahead") or 0) > 0:
        return False
    forward = max((float(v) for k, v in stages.items() if str(k).endswith(".forward")), default=None)
    return forward is not None and forward > 0 and float(server) - forward > 0.5 * forward


async def _engine_check(tools: Any, deployment_id: str) -> str:
    """After a run with failed or missing answers: what the deployment says about itself ('' if it looks ready)."""
    try:
        current = await tools.call("get_deployment", deployment_id=deployment_id)
    except ToolCallFailed as exc:
        return f"deployment {deployment_id} unreadable: {exc}"
    state = current.get("state")
    return "" if state == "ready" else f"deployment {deployment_id} is {state}"


def _every_request_failed(kind: str, record: dict[str, Any]) -> str | None:
    """Why no request of the measured phase succeeded (an OOM, a dead engine, a refusal), or None if one did."""
    phase = "probe" if kind == "probe" else "full"
    samples = [s for s in record.get("samples") or [] if s.get("phase") == phase]
    if not samples or any(s.get("ok") for s in samples):
        return None
    first = samples[0]
    detail = str(first.get("detail") or "")[:300]
    return f"every {phase} request failed ({len(samples)}): {first.get('error_kind')}: {detail}"


def _busy_model_s(record: dict[str, Any]) -> float:
    """Model seconds the node was busy: per replica, the sum of its requests' server times; the slowest replica."""
    busy: dict[str, float] = {}
    for s in record.get("samples") or []:
        t = s.get("server_time_s") if s.get("server_time_s") is not None else s.get("latency_s")
        busy[str(s.get("endpoint"))] = busy.get(str(s.get("endpoint")), 0.0) + float(t or 0.0)
    return max(busy.values(), default=0.0)


def _measured_figures(m: ws.Measurement) -> dict[str, Any]:
    if m.kind == "probe":
        return {"per_step_s": round(m.per_step_s or 0.0, 3), "fixed_s": round(m.fixed_s or 0.0, 2)}
    if not m.latencies_s:
        return {"latencies": 0}
    return {"p50_s": round(sorted(m.latencies_s)[len(m.latencies_s) // 2], 1), "n": len(m.latencies_s)}


def _bill(cand: ws.Candidate, seconds: float) -> tuple[float, float]:
    return cand.offer.usd_per_hour * seconds / 3600, cand.offer.gpu_count * seconds / 3600


def _failed(
    task: VerifyTask, cand: ws.Candidate, error: str, spent: tuple[float, float], removed: bool = False
) -> dict[str, Any]:
    kind = ws.Action.model_validate(task["action"]).kind
    m = ws.Measurement(key=cand.key, kind=kind, usd=spent[0], gpu_hours=spent[1])
    return {
        "results": [{**m.model_dump(mode="json"), "failed": True, "error": error, "removed": removed}],
        "events": [f"{kind} {cand.key} failed: {error}"],
    }


# ---- routing ---------------------------------------------------------------------------------------
def after_approval(state: TuneState) -> str:
    """Spend approved: start deciding; declined: nothing was started, go straight to finish."""
    return "decide" if state.get("approved") else "finish"


def next_actions(state: TuneState) -> list[Send] | str:
    """One `verify` branch per action (in parallel), or `finish` when the search stops."""
    decision = ws.Decision.model_validate(state["decision"])
    if decision.stop_reason or not decision.actions:
        return "finish"
    search = ws.SearchState.model_validate(state["search"])
    cands = {c.key: c for c in ws.candidates(search)}
    left = search.goal.budget_usd - search.spent_usd
    slack = max(0.0, left - sum(a.expected_usd for a in decision.actions)) / len(decision.actions)
    live = state.get("deployments") or {}
    recorded = state.get("results") or []  # what verify may not measure again, and the deployments already billed
    used = [str(r["benchmark_id"]) for r in recorded if r.get("benchmark_id")]
    billed = [str(r["deployment_id"]) for r in recorded if r.get("deployment_id")]
    return [
        Send(
            "verify",
            VerifyTask(
                run_id=state["run_id"],
                goal=state["goal"],
                options=state["options"],
                action=a.model_dump(mode="json"),
                candidate=cands[a.key].model_dump(mode="json"),
                deployment_id=live.get(a.key),
                cap_usd=a.expected_usd + slack,
                iteration=search.iterations,
                used_benchmarks=used,
                billed_deployments=billed,
            ),
        )
        for a in decision.actions
    ]


# ---- wiring ----------------------------------------------------------------------------------------
builder = StateGraph(TuneState, context_schema=Context, input_schema=TuneInput, output_schema=TuneOutput)
builder.add_node("read_goal", read_goal)
builder.add_node("prepare", prepare)
builder.add_node("approve", approve)
builder.add_node("decide", decide)
builder.add_node("verify", verify, input_schema=VerifyTask)  # type: ignore[arg-type]  # stubs miss Send inputs
builder.add_node("learn", learn)
builder.add_node("finish", finish)
builder.add_edge(START, "read_goal")
builder.add_edge("read_goal", "prepare")
builder.add_edge("prepare", "approve")
builder.add_conditional_edges("approve", after_approval, ["decide", "finish"])
builder.add_conditional_edges("decide", next_actions, ["verify", "finish"])
builder.add_edge("verify", "learn")
builder.add_edge("learn", "decide")
builder.add_edge("finish", END)

graph = builder.compile(name="worldtune")
"""The graph without a checkpointer (what `langgraph dev` / Studio loads); the runner compiles with SQLite."""
