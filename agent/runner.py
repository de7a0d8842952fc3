"""Running the graph: start a tuning run, resume it, ask how it goes; with SQLite checkpoints and cleanup.

`tune()` blocks (the CLI); `start_tuning()` returns a run id at once and runs in a thread, and
`get_tuning()` reports on any run from the database and the checkpoints (the MCP server's job pattern).
The run id is the checkpoint thread id. Whatever stops a run early (an error, Ctrl-C, SIGTERM, SIGHUP,
its MCP session ending) tears down every deployment it started before the exception leaves; what a
SIGKILL leaves is found by `worldtune gc` through the run's heartbeat (the run is owned by the process
that drives it). `resume()` continues from the last checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import threading
import time
from collections.abc import Mapping
from typing import Any

from worldtune.agent.configuration import Context, Progress, TuneOptions
from worldtune.agent.goal_parser import ParsedGoal, read_goal
from worldtune.agent.provenance import provenance
from worldtune.agent.stopping import _CONTROLS, RunStopped, _catch_signals, _Control, stop_tuning
from worldtune.policies import search as ws
from worldtune.tools import owners
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
    from worldtune.tools.infra import Infra
    from worldtune.tools.spend import check_tuning

    where = Infra.parse(options.infra)
    check_tuning(str(where), options.engine, options.budget_usd)  # a bad infra or budget: refused before parsing
    parsed = read_goal(goal_text, budget_usd=options.budget_usd, infras=[where.name] if where.kind == "cloud" else None)
    if options.budget_usd is None:  # a budget in the goal's words is bound like the argument
        check_tuning(str(where), options.engine, parsed.goal.budget_usd, "goal budget")
    return parsed


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
    if options.twin_profile:  # read once, here: a file that is not a profile stops the run before anything starts
        from worldtune.tools.profile_paths import load_profile

        for path in options.twin_profiles():  # each file given, or each profile in a folder given
            load_profile(path, "cli", "twin_profile")


# ---- driving the graph -----------------------------------------------------------------------------
async def _drive(run_id: str, graph_input: Any, options: TuneOptions, progress: Progress) -> dict[str, Any]:
    """Run (or resume) the graph to its end or to the approval interrupt; tear down on any early exit."""
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    from worldtune.agent.graph import builder
    from worldtune.agent.tools_client import connect

    store = Store(options.db_path)
    config: Any = {"configurable": {"thread_id": run_id}, "recursion_limit": RECURSION_LIMIT}
    error: BaseException | None = None
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    control = _CONTROLS[run_id] = _Control(run_id, loop, task)
    caught = _catch_signals(loop, control)
    try:
        async with (
            AsyncSqliteSaver.from_conn_string(str(options.checkpoint_path())) as saver,
            connect(str(store.path), options.mcp_url) as tools,
        ):
            graph = builder.compile(checkpointer=saver, name="worldtune")
            context = Context(tools=tools, progress=progress)
            stream = graph.astream(
                graph_input, config, context=context, stream_mode=["updates", "custom"], durability="sync"
            )
            try:
                async for _ in stream:
                    if control.reason is not None:
                        raise asyncio.CancelledError
                if control.reason is not None:  # asked to stop while the last step ran: not a success
                    raise asyncio.CancelledError
            except BaseException as exc:  # signals and cancellation included: nothing may be left running
                error = control.notice() or exc
                closing = getattr(stream, "aclose", None)  # an async generator: closing it stops its tasks
                if closing is not None:
                    with contextlib.suppress(BaseException):
                        await closing()
                why = str(error) or type(error).__name__
                store.finish_run(run_id, "interrupted", {"error": why, "resume": f"worldtune resume {run_id}"})
                await _cleanup(tools, run_id, progress)
            else:
                snapshot = await graph.aget_state(config)
    finally:
        for sig in caught:
            loop.remove_signal_handler(sig)
        _CONTROLS.pop(run_id, None)
    if error is not None:  # raised here, outside the MCP session, so it is not wrapped in a task-group error
        raise error
    values = dict(snapshot.values)
    if snapshot.interrupts:
        # the approve node recorded the wait (mark_waiting) before its interrupt, for every driver of the graph
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
    parsed = goal if isinstance(goal, ParsedGoal) else goal_for(goal, options)
    run_id = run_id or new_run_id()
    first = first_state(parsed, options, run_id)
    progress("goal", {"goal": parsed.goal.describe(), "assumptions": parsed.assumptions, "run_id": run_id})
    return asyncio.run(_drive(run_id, first, options, progress))


def mark_waiting(run_id: str, spend_estimate: dict[str, Any] | None, db_path: str | None) -> None:
    """The run waits for its spend to be approved: nothing is started, so its owner lets go meanwhile."""
    Store(db_path).finish_run(run_id, "waiting_for_approval", {"spend_estimate": spend_estimate})


def mark_approved(run_id: str, db_path: str | None) -> None:
    """The spend is approved: the run is running again, owned by the process that goes on with it."""
    Store(db_path).restart_run(run_id)


def write_record(run_id: str, summary: dict[str, Any], db_path: str | None) -> None:
    """The run's record, completed: its owner lets go (whoever drove the graph: the runner or Studio)."""
    Store(db_path).finish_run(run_id, "completed", summary)


def first_state(parsed: ParsedGoal, options: TuneOptions, run_id: str) -> dict[str, Any]:
    """A run's first state, recorded in the results database: what `tune` and the graph's read_goal start from."""
    _check_options(options)
    Store(options.db_path).add_run(run_id, "tune", parsed.goal.model_dump(mode="json"))
    return {
        "run_id": run_id,
        "goal_text": parsed.text,
        "goal": parsed.goal.model_dump(mode="json"),
        "goal_source": parsed.source,
        "options": options.model_dump(mode="json"),
        "results": [],
        "events": [f"goal: {parsed.goal.describe()} (read by the {parsed.source})"],
    }


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
    Store(options.db_path).restart_run(run_id)  # this process owns (and heartbeats) the run from now on
    return asyncio.run(_drive(run_id, graph_input, options, progress))


# ---- the job pattern for the MCP server -----------------------------------------------------------
_THREADS: dict[str, threading.Thread] = {}
_ERRORS: dict[str, str] = {}


def _in_thread(run_id: str, db_path: str | None, body: Any) -> None:
    """Run `body()` on a background thread named for the run; its failure is recorded, a stop is not one."""

    def work() -> None:
        try:
            body()
        except RunStopped:
            pass  # recorded as interrupted by the run itself, after its teardown
        except Exception as exc:
            _ERRORS[run_id] = f"{type(exc).__name__}: {exc}"
            Store(db_path).finish_run(run_id, "failed", {"error": _ERRORS[run_id]})

    thread = threading.Thread(target=work, name=f"worldtune-{run_id}", daemon=True)
    _THREADS[run_id] = thread
    thread.start()


def start_tuning(goal_text: str, options: TuneOptions | None = None, detach: bool = False) -> str:
    """Start a tuning run in a background thread; returns its run id (= thread id) at once.

    The goal is parsed first, so an ambiguous goal raises GoalQuestion here, before anything starts.
    Without options.yes the run stops at the approval question: answer it with resume_tuning.
    A run in a thread ends with the MCP session that started it (stop_session_runs); `detach` starts it
    in a process of its own instead (agent/detached.py), which outlives the session and the server.
    """
    options = options or TuneOptions()
    _check_options(options)
    parsed = goal_for(goal_text, options)
    run_id = new_run_id()
    store = Store(options.db_path)
    store.add_run(run_id, "tune", parsed.goal.model_dump(mode="json"), detach=detach)
    if detach:
        _spawn_detached(run_id, goal_text, options.model_copy(update={"db_path": str(store.path)}))
        owners.HEARTBEAT.drop(store.path, run_id)  # the spawned process owns and heartbeats it now
        return run_id
    _in_thread(run_id, options.db_path, lambda: tune(parsed, options, run_id=run_id))
    return run_id


def _spawn_detached(run_id: str, goal_text: str, options: TuneOptions) -> None:
    """The run in its own session and process; its output goes to logs/RUN_ID.log next to the database."""
    import subprocess
    import sys
    from pathlib import Path

    logs = Path(str(options.db_path)).parent / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with open(logs / f"{run_id}.log", "ab") as log:
        subprocess.Popen(
            [sys.executable, "-m", "worldtune.agent.detached", run_id, options.model_dump_json(), goal_text],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip


def resume_tuning(run_id: str, approve: bool | None = None, db_path: str | None = None) -> str:
    """Resume a run in a background thread (answering the approval question when `approve` is given)."""
    _in_thread(run_id, db_path, lambda: resume(run_id, db_path, approve))
    return run_id


def stop_session_runs(wait_s: float = 120.0) -> list[str]:
    """The MCP session ended: stop every run this process drives in a thread (detached runs are processes
    of their own and go on), and wait for their teardown, at most `wait_s`. Returns the ids stopped.

    The policy (README "MCP sessions"): a run started over MCP belongs to the session and ends with it;
    `detach=true` runs it in its own process, and if that process dies, `worldtune gc` tears down what it
    left (its heartbeat stops).
    """
    live = {r: t for r, t in _THREADS.items() if t.is_alive()}
    stopped = [r for r in live if stop_tuning(r, "MCP session ended")]
    deadline = time.monotonic() + wait_s
    for run_id, thread in live.items():
        _join(run_id, thread, deadline)
    return stopped


def _join(run_id: str, thread: threading.Thread, deadline: float) -> None:
    """Wait for a run's thread to finish its teardown; a signal meanwhile (the client escalating) does not cut
    the wait short: SIGKILL would, and then gc tears down the rest."""
    while thread.is_alive() and time.monotonic() < deadline:
        try:
            thread.join(timeout=0.2)
        except KeyboardInterrupt:
            stop_tuning(run_id, "signal while the MCP session ended")


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
    elif status == "running" and not store.owner_alive(run_id):
        status = "interrupted"  # its process is gone: gc tears down what it left, resume continues it
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
            "replans": sum(len(d.get("previous_plans") or []) for d in deployments.get("deployments", [])),
            "benchmarks": sum(1 for r in results if r.get("benchmark_id")),
            "model_seconds": round(model_s, 1),
            # time to a verified answer on real infra: provisioning, loads and requests; one after another with
            # --parallel 1, else the verifications of one round overlap (assumed: evenly over the lanes)
            "answer_hours": round(model_s / options.parallel / 3600.0, 3),
            "answer_basis": ("modelled: the twin's model-seconds" if options.twin else "wall time of the rented nodes")
            + ("" if options.parallel == 1 else f", divided over {options.parallel} parallel lanes (assumed even)"),
            "priced_as": "offer price x modelled GPU seconds (twin)" if options.twin else "offer price x wall time",
        },
        "spend_estimate": state.get("spend_estimate"),
        "decision": state.get("decision"),
        "events": list(state.get("events") or []),
        "measurements": results,
        "candidates": [],
    }
    if search is None:
        summary["provenance"] = provenance(summary)
        return summary
    summary["rejected"] = [r.model_dump(mode="json") for r in search.rejected]
    summary["failed"] = dict(search.failures)
    summary["nearest"] = (state.get("decision") or {}).get("nearest") or []
    # what the run's measurements taught it, per GPU type: the fleet step plans a goal's traffic with these
    summary["learned_profiles"] = {g: search.beliefs[g].model_dump(mode="json") for g in search.posteriors}
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
    summary["provenance"] = provenance(summary)  # what is simulated, measured, assumed; how prices are dated
    return summary
