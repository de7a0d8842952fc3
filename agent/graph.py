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
import time
from typing import Any

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Send, interrupt

from worldtune.agent.configuration import Context, TuneOptions
from worldtune.agent.events import (
    Believed,
    Done,
    Elapsed,
    Failed,
    KeptNode,
    Learned,
    Next,
    Rejected,
    Stopped,
)
from worldtune.agent.record import (
    build_summary,
    first_state,
    goal_for,
    mark_approved,
    mark_waiting,
    open_record,
    write_record,
)
from worldtune.agent.state import TuneInput, TuneOutput, TuneState, VerifyTask, answer_seconds
from worldtune.agent.steps import emit, listed_offers, teardown
from worldtune.agent.tools import Tools
from worldtune.agent.verify import verify
from worldtune.policies import search as policy
from worldtune.tools.words.goal import Goal
from worldtune.tools.words.tuning import SpendEstimate, SpendForecast


# ---- nodes -----------------------------------------------------------------------------------------
async def read_goal(state: TuneState, runtime: Runtime[Context]) -> dict[str, Any]:
    """A run started with only the goal text (Studio, `langgraph dev`) reads it here as `tune` does; the runner
    has done this before the graph starts, and the node passes its state on untouched."""
    # Studio's form sends JSON: the words are made here (the runner passes them made, and they pass untouched)
    options = TuneOptions.model_validate(state.get("options") or {})
    if state.get("goal"):  # the runner read it; the record is opened here for every driver of the graph
        goal = Goal.model_validate(state["goal"])
        await open_record(runtime.context.tools, state["run_id"], goal.model_dump(mode="json"))
        made = {"goal": goal, "options": options}
        return {k: v for k, v in made.items() if v is not state.get(k)}
    from worldtune.tools.plans.spend import needs_confirmation

    # as start_tuning does: a free run (the local twin) needs no approval, a paid one asks
    if "yes" not in options.model_fields_set:
        options = options.model_copy(update={"yes": not needs_confirmation(options.infra, options.engine)})
    thread = runtime.execution_info.thread_id if runtime.execution_info else None
    run_id = state.get("run_id") or str(thread or "")
    parsed = await asyncio.to_thread(goal_for, state.get("goal_text", ""), options)
    first = first_state(parsed, options, run_id or f"studio-{int(time.time())}")
    await open_record(runtime.context.tools, first["run_id"], parsed.goal.model_dump(mode="json"))
    return {k: v for k, v in first.items() if k != "results"}


async def prepare(state: TuneState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Offers (MCP list_offers) x valid plans, ranked by the performance model under the goal; a spend estimate."""
    goal, options = state["goal"], state["options"]
    offers = await listed_offers(runtime.context.tools, options.infra)
    search = policy.initial_state(goal, offers, include_fp8=goal.allow_fp8).model_copy(
        update={"reuse_nodes": options.reuse_nodes}
    )
    ranked = policy.candidates(search)
    feasible = [c for c in ranked if c.feasible]
    plan, lanes_why = policy.lanes_for_deadline(search, options.parallel, options.reuse_nodes)
    # the bound is what may be committed; the forecast is what the search will likely cost (simulated)
    likely = await asyncio.to_thread(policy.forecast, search, plan.parallel)
    requests, lane = policy.claim_lanes(search)  # the claim at the goal's confidence, its run over lanes
    refusal = await asyncio.to_thread(policy.deadline_refusal, search, likely)
    estimate = SpendEstimate(
        parallel=plan.parallel,
        usd=round(plan.usd, 2),
        gpu_hours=round(plan.gpu_hours, 2),
        answer_hours=round(plan.answer_s / 3600.0, 2),
        deployments=plan.deployments,
        cold_loads=plan.cold_loads,
        warm_loads=plan.warm_loads,
        estimate_basis=plan.basis,
        budget_usd=goal.budget_usd,
        candidates=len(ranked),
        feasible=len(feasible),
        first_to_verify=plan.keys[:5],
        engine=options.engine,
        infra=options.infra,
        priced_as="the offers' prices for the modelled GPU time (twin rehearsal)" if options.twin else "the offers",
        parallel_why=lanes_why or None,  # a deadline bought lanes, or could not
        confidence=goal.confidence,
        claim_requests=requests,
        claim_lanes=lane.lanes if lane else 1,
        claim_lanes_why=lane.why if lane else "",
        forecast=SpendForecast(
            usd=round(likely.usd_p50, 2),
            usd_max=round(likely.usd_max, 2),
            gpu_hours=round(likely.gpu_hours_p50, 2),
            answer_hours=round(likely.answer_s_p50 / 3600.0, 2),
            answer_hours_max=round(likely.answer_s_max / 3600.0, 2),
            measurements=likely.measurements_p50,
            runs=likely.runs,
            stops=likely.stops,
            basis=likely.basis,
        ),
    )
    top = [f"{c.plan} on {c.offer.id}: {c.usd_per_clip:.3f} $/clip, p50 {c.latency_s:.0f} s" for c in feasible[:3]]
    emit(runtime, Believed(count=len(ranked), feasible=len(feasible), top=top, estimate=estimate))
    stopped: dict[str, Any] = {}
    if refusal:  # an answer-within the search cannot meet: refused here, before anything is spent
        emit(runtime, Stopped(reason=refusal, kind="deadline"))
        stopped = {"stop_reason": refusal, "stop_kind": "deadline", "approved": False}
    return stopped | {
        "search": search,
        "initial_beliefs": dict(search.beliefs),
        "spend_estimate": estimate,
        "learned": 0,
        # a deadline may buy lanes: every node after this one (decide, the answer's time) runs with them
        "options": options.model_copy(update={"parallel": plan.parallel}),
        "events": [
            f"{len(ranked)} candidates ({len(feasible)} predicted to meet the goal); at most ${plan.usd:.2f}, "
            f"likely ${likely.usd_p50:.2f} (simulated)"
        ]
        + ([lanes_why] if lanes_why else []),
    }


async def approve(state: TuneState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Ask before spending (interrupt), unless the run was started with --yes; a goal prepare refused is not asked."""
    if state.get("stop_kind") == "deadline" and not state.get("approved", True):
        return {"approved": False, "events": ["refused before any spend: " + state.get("stop_reason", "")]}
    if state["options"].yes:
        from worldtune.tools.plans.spend import needs_confirmation

        if not needs_confirmation(state["options"].infra, state["options"].engine):
            return {
                "approved": True,
                "events": ["no approval needed: the local twin bills nothing (its spend is modelled)"],
            }
        return {"approved": True, "events": ["spend approved by --yes"]}

    tools = runtime.context.tools
    # recorded here, so a run that Studio / `langgraph dev` drives says it waits, as one `tune` drives does (the
    # node runs again on resume: the record says waiting until the answer is in, then running again)
    estimate = state["spend_estimate"].as_json()
    await mark_waiting(tools, state["run_id"], estimate)
    answer = interrupt(
        {
            "question": "Approve this spend?",
            "goal": state["goal"].describe(),
            "spend_estimate": estimate,
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
    await mark_approved(tools, state["run_id"])
    return {"approved": True, "events": ["spend approved"]}


async def decide(state: TuneState, runtime: Runtime[Context]) -> dict[str, Any]:
    """The search policy's next actions (at most --parallel), or why to stop; tear down what is not needed."""
    options = state["options"]
    live = dict(state.get("deployments") or {})
    spares = dict(state.get("spare_lanes") or {})
    search = state["search"].model_copy(update={"deployed": list(live), "spare_lanes": list(spares.values())})
    decision = policy.decide(
        search, parallel=options.parallel, margin=options.margin, max_iterations=options.max_iterations
    )
    wanted = policy.kept_spares(list(spares.values()), decision.actions)
    freed: dict[str, str] = {}
    for deployment_id, key in spares.items():  # spare nodes no full run (or probe launching lanes) will use
        if key in wanted:
            wanted.remove(key)
        else:
            await teardown(runtime, deployment_id)
            freed[deployment_id] = ""
    keep, moved, joined = policy.hand_over(decision.actions, live, options.reuse_nodes)
    removed: dict[str, str] = {}
    for key, deployment_id in live.items():
        if key not in keep:
            if key in joined:  # a lane of the decision's full run on its offer (claim_run replans it)
                freed[deployment_id] = key
            elif deployment_id not in moved.values():  # a node no longer needed is released at once
                await teardown(runtime, deployment_id)
            removed[key] = ""
    for key, deployment_id in moved.items():
        emit(runtime, KeptNode(key=key, deployment=deployment_id))
    update: dict[str, Any] = {"decision": decision, "deployments": removed | moved, "spare_lanes": freed}
    if decision.stop_reason:
        emit(runtime, Stopped(reason=decision.stop_reason, kind=decision.stop_kind))
        update |= {"stop_reason": decision.stop_reason, "stop_kind": decision.stop_kind or ""}
        update["events"] = [f"stop: {decision.stop_reason}"]
    else:
        for a in decision.actions:
            emit(
                runtime,
                Next(
                    kind=a.kind,
                    key=a.key,
                    reason=a.reason,
                    expected_usd=round(a.expected_usd, 2),
                    value=round(a.value, 5),
                    requests=a.requests,
                ),
            )
        update["events"] = [f"next: {a.kind} {a.key} ({a.reason})" for a in decision.actions]
    return update


async def learn(state: TuneState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Fold new measurements into the search and recalibrate the belief of each GPU type measured."""
    search = state["search"]
    results = state.get("results") or []
    done = state.get("learned", 0)
    fresh = results[done:]
    gpus: set[str] = set()
    events: list[str] = []
    for outcome in fresh:
        m = outcome.measurement
        if outcome.failed:
            search = policy.record_failure(search, m.key, m.usd, m.gpu_hours, outcome.error or "failed")
            events.append(f"{m.key}: {outcome.error}")
            # people see why (a load that ran out of memory, every request failing), not only that money went
            emit(runtime, Failed(key=m.key, error=(outcome.error or "failed")[:600]))
            continue
        rejected = len(search.rejected)
        search = policy.record(search, m, recalibrate=False)
        if len(search.rejected) > rejected:
            r = search.rejected[-1]
            then = "retry on a fresh deployment" if m.key in search.retry else f"failed: {search.failures.get(m.key)}"
            events.append(f"rejected {r.kind} {m.key} (benchmark {r.benchmark_id}): {r.reason}; {then}")
            emit(runtime, Rejected(key=m.key, reason=r.reason, then=then))
            continue
        gpus.add(policy.hardware_key(m.key).split(":")[0])
    for gpu in sorted(gpus):
        search = policy.recalibrated(search, gpu)
        post = search.posterior(gpu)
        note = (
            f"recalibrated {gpu}: posterior from {post.observations} observations (model error "
            f"{post.model_error:.2%}, {len(post.alternatives) + 1} explanation(s), the MAP's weight "
            f"{post.weight:.0%}): {post.summary()}"
        )
        events.append(note)
        emit(runtime, Learned(gpu=gpu, note=note, spent_usd=round(search.spent_usd, 2)))
    # time to a verified answer so far (modelled on the twin): the verifications' seconds, lanes overlapping
    answer_s = answer_seconds(results, state["options"].parallel)
    search = search.model_copy(update={"elapsed_s": answer_s})  # what a goal's 'answer within' is held to
    emit(runtime, Elapsed(answer_hours=round(answer_s / 3600.0, 3), measurements=len(results)))
    live = {r.key: "" for r in fresh if r.removed}
    return {"search": search, "learned": len(results), "events": events, "deployments": live}


async def finish(state: TuneState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Tear down everything the run started (also what a crashed attempt left) and write the record."""
    tools: Tools = runtime.context.tools
    run_id = state["run_id"]
    for d in await tools.list_deployments(run_id=run_id, alive_only=True):
        await teardown(runtime, d.id)

    summary = build_summary(state, await tools.list_deployments(run_id=run_id))
    # written here, so a run that Studio / `langgraph dev` drives (no runner around it) ends completed too
    await write_record(tools, run_id, summary)
    emit(runtime, Done(stop_reason=summary.stop_reason, recommendation=summary.recommendation))
    cleared = {k: "" for k in (state.get("deployments") or {})}
    spares = dict.fromkeys(state.get("spare_lanes") or {}, "")
    return {"summary": summary, "deployments": cleared, "spare_lanes": spares, "events": ["torn down; record written"]}


# ---- small pieces the nodes share ------------------------------------------------------------------


# ---- routing ---------------------------------------------------------------------------------------
def after_approval(state: TuneState) -> str:
    """Spend approved: start deciding; declined: nothing was started, go straight to finish."""
    return "decide" if state.get("approved") else "finish"


def next_actions(state: TuneState) -> list[Send] | str:
    """One `verify` branch per action (in parallel), or `finish` when the search stops."""
    decision, search = state["decision"], state["search"]
    if decision.stop_reason or not decision.actions:
        return "finish"
    cands = {c.key: c for c in policy.candidates(search)}
    left = search.goal.budget_usd - search.spent_usd
    slack = max(0.0, left - sum(a.expected_usd for a in decision.actions)) / len(decision.actions)
    live = state.get("deployments") or {}
    recorded = state.get("results") or []  # what verify may not measure again, and the deployments already billed
    used = [b for r in recorded for b in r.measurement.benchmarks()]
    billed = [r.deployment_id for r in recorded if r.deployment_id]
    return [
        Send(
            "verify",
            VerifyTask(
                run_id=state["run_id"],
                goal=state["goal"],
                options=state["options"],
                action=a,
                candidate=cands[a.key],
                deployment_id=live.get(a.key),
                cap_usd=a.expected_usd + slack,
                iteration=search.iterations,
                used_benchmarks=used,
                billed_deployments=billed,
                spare_lanes=dict(state.get("spare_lanes") or {}),
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
builder.add_node("verify", verify, input_schema=VerifyTask)  # type: ignore[call-overload]  # stubs miss Send inputs
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
