"""Running the graph: start a tuning run, resume it, ask how it goes; with SQLite checkpoints and cleanup.

`tune()` blocks (the CLI); `start_tuning()` returns a run id at once and runs in a thread, and
`get_tuning()` reports on any run from the database and the checkpoints (the MCP server's job pattern).
The run id is the checkpoint thread id. Whatever stops a run early (an error, Ctrl-C) tears down every
deployment it started before the exception leaves; `resume()` continues from the last checkpoint.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from collections.abc import Mapping
from typing import Any

from worldtune.agent.configuration import Context, Progress, TuneOptions
from worldtune.agent.goal_parser import ParsedGoal, read_goal
from worldtune.policies import search as ws
from worldtune.tools.errors import InvalidInput
from worldtune.tools.goal import Goal
from worldtune.tools.profile import Profile
from worldtune.tools.store import Store

RECURSION_LIMIT = 1000  # the search's own iteration cap stops long before this


def new_run_id() -> str:
    return f"tune-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def _quiet(kind: str, data: dict[str, Any]) -> None:
    del kind, data


def goal_for(goal_text: str, options: TuneOptions) -> ParsedGoal:
    """The goal as the run will use it: the command line's budget and cloud win over the text."""
    from worldtune.tools.deploy import infra_kind

    infras = [options.infra.lower()] if infra_kind(options.infra) == "cloud" else None
    return read_goal(goal_text, budget_usd=options.budget_usd, infras=infras)


def _check_options(options: TuneOptions) -> None:
    if options.engine not in ("twin", "vllm-omni"):
        raise InvalidInput("engine", options.engine, "twin or vllm-omni")
    if options.engine == "vllm-omni" and options.infra == "local":
        raise InvalidInput(
            "engine",
            options.engine,
            "twin on infra local: this machine has no GPU",
            "use --infra slurm/NAME, kubernetes or a cloud",
        )
    if options.twin_profile and options.engine != "twin":
        raise InvalidInput("twin_profile", options.twin_profile, "only with --engine twin")


# ---- driving the graph -----------------------------------------------------------------------------
async def _drive(run_id: str, graph_input: Any, options: TuneOptions, progress: Progress) -> dict[str, Any]:
    """Run (or resume) the graph to its end or to the approval interrupt; tear down on any early exit."""
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    from worldtune.agent.graph import builder
    from worldtune.agent.tools_client import connect

    store = Store(options.db_path)
    config: Any = {"configurable": {"thread_id": run_id}, "recursion_limit": RECURSION_LIMIT}
    error: BaseException | None = None
    async with (
        AsyncSqliteSaver.from_conn_string(str(options.checkpoint_path())) as saver,
        connect(str(store.path), options.mcp_url) as tools,
    ):
        graph = builder.compile(checkpointer=saver, name="worldtune")
        context = Context(tools=tools, progress=progress)
        try:
            async for _ in graph.astream(
                graph_input, config, context=context, stream_mode=["updates", "custom"], durability="sync"
            ):
                pass
        except BaseException as exc:  # Ctrl-C and cancellation included: nothing may be left running
            error = exc
            store.finish_run(
                run_id, "interrupted", {"error": str(exc) or type(exc).__name__, "resume": f"worldtune resume {run_id}"}
            )
            await _cleanup(tools, run_id, progress)
        else:
            snapshot = await graph.aget_state(config)
    if error is not None:  # raised here, outside the MCP session, so it is not wrapped in a task-group error
        raise error
    values = dict(snapshot.values)
    if snapshot.interrupts:
        store.finish_run(run_id, "waiting_for_approval", {"spend_estimate": values.get("spend_estimate")})
        return {
            "run_id": run_id,
            "thread_id": run_id,
            "status": "waiting_for_approval",
            "question": snapshot.interrupts[0].value,
            "state": values,
        }
    summary = values.get("summary") or {}
    store.finish_run(run_id, "completed", summary)
    return {"run_id": run_id, "thread_id": run_id, "status": "completed", "summary": summary, "state": values}


async def _cleanup(tools: Any, run_id: str, progress: Progress, settle_s: float = 60.0) -> None:
    """Tear down every live deployment of the run (shielded: it must finish even while cancelled).

    A deploy that was in flight when the run stopped may still be starting in the server's worker
    thread, so the listing is repeated until it stays empty (or `settle_s` passes).
    """

    async def stop_all() -> None:
        deadline = time.monotonic() + settle_s
        quiet = 0
        while quiet < 2 and time.monotonic() < deadline:
            listed = await tools.call("list_deployments", run_id=run_id, alive_only=True)
            found = listed.get("deployments", [])
            quiet = 0 if found else quiet + 1
            for d in found:
                await tools.call("teardown", deployment_id=str(d["id"]), confirm=True)
                progress("teardown", {"deployment": d["id"], "note": "run stopped early"})
            await asyncio.sleep(0.5)

    try:
        await asyncio.shield(stop_all())
    except Exception as exc:  # the original error matters more; say what could not be stopped
        progress("cleanup-failed", {"error": str(exc), "hint": "worldtune gc, or teardown by id"})


def tune(
    goal: str | ParsedGoal,
    options: TuneOptions | None = None,
    progress: Progress = _quiet,
    run_id: str | None = None,
) -> dict[str, Any]:
    """Run a tuning run to its end (or to the approval question when not --yes); returns the outcome."""
    options = options or TuneOptions()
    _check_options(options)
    parsed = goal if isinstance(goal, ParsedGoal) else goal_for(goal, options)
    run_id = run_id or new_run_id()
    Store(options.db_path).add_run(run_id, "tune", parsed.goal.model_dump(mode="json"))
    first = {
        "run_id": run_id,
        "goal_text": parsed.text,
        "goal": parsed.goal.model_dump(mode="json"),
        "goal_source": parsed.source,
        "options": options.model_dump(mode="json"),
        "results": [],
        "events": [f"goal: {parsed.goal.describe()} (read by the {parsed.source})"],
    }
    progress("goal", {"goal": parsed.goal.describe(), "assumptions": parsed.assumptions, "run_id": run_id})
    return asyncio.run(_drive(run_id, first, options, progress))


def checkpointed_options(run_id: str, db_path: str | None = None) -> TuneOptions:
    """The options a run was started with, read from its checkpoint (resume needs nothing else)."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    from worldtune.agent.graph import builder

    probe = TuneOptions(db_path=db_path)
    path = probe.checkpoint_path()
    if not path.is_file():
        raise InvalidInput("thread_id", run_id, f"a run in {path}", "pass the --db the run used")
    with SqliteSaver.from_conn_string(str(path)) as saver:
        snapshot = builder.compile(checkpointer=saver).get_state({"configurable": {"thread_id": run_id}})
    if not snapshot.values:
        raise InvalidInput("thread_id", run_id, f"the id of a run checkpointed in {path}")
    options = TuneOptions.model_validate(snapshot.values["options"])
    return options.model_copy(update={"db_path": db_path or options.db_path})


def resume(
    run_id: str, db_path: str | None = None, approve: bool | None = None, progress: Progress = _quiet
) -> dict[str, Any]:
    """Continue a run that crashed, was killed or waits for approval (approve answers the question)."""
    from langgraph.types import Command

    options = checkpointed_options(run_id, db_path)
    graph_input: Any = None if approve is None else Command(resume={"approved": approve})
    progress("resume", {"run_id": run_id})
    return asyncio.run(_drive(run_id, graph_input, options, progress))


# ---- the job pattern for the MCP server -----------------------------------------------------------
_THREADS: dict[str, threading.Thread] = {}
_ERRORS: dict[str, str] = {}


def start_tuning(goal_text: str, options: TuneOptions | None = None) -> str:
    """Start a tuning run in a background thread; returns its run id (= thread id) at once.

    The goal is parsed first, so an ambiguous goal raises GoalQuestion here, before anything starts.
    Without options.yes the run stops at the approval question: answer it with resume_tuning.
    """
    options = options or TuneOptions()
    _check_options(options)
    parsed = goal_for(goal_text, options)
    run_id = new_run_id()
    Store(options.db_path).add_run(run_id, "tune", parsed.goal.model_dump(mode="json"))

    def work() -> None:
        try:
            tune(parsed, options, run_id=run_id)
        except Exception as exc:
            _ERRORS[run_id] = f"{type(exc).__name__}: {exc}"
            Store(options.db_path).finish_run(run_id, "failed", {"error": _ERRORS[run_id]})

    thread = threading.Thread(target=work, name=f"worldtune-{run_id}", daemon=True)
    _THREADS[run_id] = thread
    thread.start()
    return run_id


def resume_tuning(run_id: str, approve: bool | None = None, db_path: str | None = None) -> str:
    """Resume a run in a background thread (answering the approval question when `approve` is given)."""

    def work() -> None:
        try:
            resume(run_id, db_path, approve)
        except Exception as exc:
            _ERRORS[run_id] = f"{type(exc).__name__}: {exc}"
            Store(db_path).finish_run(run_id, "failed", {"error": _ERRORS[run_id]})

    thread = threading.Thread(target=work, name=f"worldtune-{run_id}", daemon=True)
    _THREADS[run_id] = thread
    thread.start()
    return run_id


def get_tuning(run_id: str, db_path: str | None = None) -> dict[str, Any]:
    """Where a run stands: status, what it did so far, spend, and its record once finished."""
    store = Store(db_path)
    row = store.get_run(run_id)
    if row is None:
        known = [r["id"] for r in store.list_runs(10) if r["kind"] == "tune"]
        raise InvalidInput("run_id", run_id, "the id start_tuning returned", f"recent: {', '.join(known) or 'none'}")
    thread = _THREADS.get(run_id)
    status = str(row["status"])
    if thread is not None and thread.is_alive():
        status = "running"
    out: dict[str, Any] = {"run_id": run_id, "status": status, "error": _ERRORS.get(run_id)}
    try:
        from langgraph.checkpoint.sqlite import SqliteSaver

        from worldtune.agent.graph import builder

        path = TuneOptions(db_path=db_path).checkpoint_path()
        if path.is_file():
            with SqliteSaver.from_conn_string(str(path)) as saver:
                snap = builder.compile(checkpointer=saver).get_state({"configurable": {"thread_id": run_id}})
            values = snap.values or {}
            search = values.get("search") or {}
            out |= {
                "events": (values.get("events") or [])[-20:],
                "spent_usd": search.get("spent_usd", 0.0),
                "measurements": len(search.get("measurements") or []),
                "stop_reason": values.get("stop_reason"),
                "spend_estimate": values.get("spend_estimate"),
                "waiting_for_approval": bool(snap.interrupts),
            }
    except Exception as exc:  # a checkpoint being written right now: report what the database says
        out["note"] = f"checkpoint not readable now: {exc}"
    if isinstance(row.get("summary"), dict) and status == "completed":
        out["summary"] = row["summary"]
    return out


# ---- the record ------------------------------------------------------------------------------------
def _figures(goal: Goal, cand: ws.Candidate | None, latencies: list[float] | None = None) -> dict[str, Any]:
    """The record's figures: a measured percentile only as tools/stats claims it (order statistics when n allows;
    else null, with the named parametric bound and its assumption beside it)."""
    if cand is None:
        return {"latency_p50_s": None, "latency_p95_s": None, "clips_per_hour_per_node": None, "usd_per_clip": None}
    out: dict[str, Any] = {
        "latency_p50_s": round(cand.latency_s, 2),
        "latency_p95_s": round(cand.latency_s * (1 + 1.645 * 0.002), 2),
        "clips_per_hour_per_node": round(cand.clips_per_hour_per_node, 3),
        "usd_per_clip": round(cand.usd_per_clip, 4),
    }
    if latencies:
        from worldtune.tools import stats

        p95 = stats.percentile_verdict(latencies, 95)
        out["latency_p95_s"] = round(p95.upper, 2) if p95.upper is not None else None
        out["latency_p95_claim"] = "claimable (order statistics)" if p95.claimable else p95.note
        verdict = stats.percentile_verdict(latencies, goal.latency_percentile)
        if verdict.parametric_upper is not None:
            out[verdict.parametric_name] = round(verdict.parametric_upper, 2)
            out["parametric_assumption"] = verdict.parametric_assumption
        out["samples"] = len(latencies)
    return out


def build_summary(state: Mapping[str, Any], deployments: Mapping[str, Any]) -> dict[str, Any]:
    """The run's record: goal, recommendation, measured vs predicted, spend, stop reason, every candidate."""
    goal = Goal.model_validate(state["goal"])
    options = TuneOptions.model_validate(state["options"])
    search = ws.SearchState.model_validate(state["search"]) if state.get("search") else None
    results = list(state.get("results") or [])
    model_s = sum(float(r.get("model_s", 0.0)) for r in results)
    summary: dict[str, Any] = {
        "run_id": state["run_id"],
        "thread_id": state["run_id"],
        "goal": {**goal.model_dump(mode="json"), "text": state.get("goal_text", ""), "describe": goal.describe()},
        "goal_source": state.get("goal_source", "parser"),
        "options": options.model_dump(mode="json"),
        "stop_reason": state.get("stop_reason") or "stopped",
        "stop_kind": state.get("stop_kind") or "",
        "recommendation": None,
        "measured": _figures(goal, None),
        "predicted": _figures(goal, None),
        "spend": {
            "gpu_hours": round(search.spent_gpu_hours, 4) if search else 0.0,
            "usd": round(search.spent_usd, 4) if search else 0.0,
            "budget_usd": goal.budget_usd,
            "deployments": len(deployments.get("deployments", [])),
            "benchmarks": sum(1 for r in results if r.get("benchmark_id")),
            "model_seconds": round(model_s, 1),
            "priced_as": "offer price x modelled GPU seconds (twin)" if options.twin else "offer price x wall time",
        },
        "spend_estimate": state.get("spend_estimate"),
        "decision": state.get("decision"),
        "events": list(state.get("events") or []),
        "measurements": results,
        "candidates": [],
    }
    if search is None:
        return summary
    summary["rejected"] = [r.model_dump(mode="json") for r in search.rejected]
    summary["failed"] = dict(search.failures)
    summary["nearest"] = (state.get("decision") or {}).get("nearest") or []
    initial = search.model_copy(
        update={
            "beliefs": {g: Profile.model_validate(p) for g, p in (state.get("initial_beliefs") or {}).items()}
            or search.beliefs,
            "posteriors": {},
            "measurements": [],
        }
    )
    before = {c.key: c for c in ws.candidates(initial)}
    now = ws.candidates(search)
    summary["candidates"] = [
        {
            "key": c.key,
            "gpu": c.gpu,
            "plan": c.plan,
            "offer": c.offer.id,
            "capacity": c.capacity,
            "usd_per_hour": c.offer.usd_per_hour,
            "nodes": c.nodes,
            "stage": c.stage,
            "feasible": c.feasible,
            "latency_s": c.latency_s,
            "latency_q_s": c.latency_q_s,
            "clips_per_hour_per_node": c.clips_per_hour_per_node,
            "usd_per_clip": c.usd_per_clip,
            "predicted_latency_s": before[c.key].latency_s if c.key in before else None,
            "predicted_usd_per_clip": before[c.key].usd_per_clip if c.key in before else None,
            "predicted_clips_per_hour_per_node": before[c.key].clips_per_hour_per_node if c.key in before else None,
        }
        for c in now
    ]
    best = ws.recommendation(search)
    if best is not None:
        latencies = [
            x for m in search.measurements if ws.hardware_key(m.key) == ws.hardware_key(best.key) for x in m.latencies_s
        ]
        summary["recommendation"] = {
            "key": best.key,
            "gpu": best.gpu,
            "plan": best.plan,
            "replicas": best.replicas,
            "replicas_per_node": best.replicas // best.nodes,
            "nodes": best.nodes,
            "capacity": best.capacity,
            "offer": best.offer.id,
            "usd_per_hour": best.offer.usd_per_hour,
            "offer_detail": best.offer.model_dump(mode="json"),
        }
        summary["measured"] = _figures(goal, best, latencies)
        summary["predicted"] = _figures(goal, before.get(best.key))
    return summary
