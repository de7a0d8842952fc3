"""Running the graph: start a tuning run, resume it, ask how it goes; with SQLite checkpoints and cleanup.

`tune()` blocks (the CLI); for the MCP server's job pattern (tools/runs/tuning_jobs.py records each run and asks
agent/tuner.py), `prepare()` reads a goal, `run_in_thread()` / `spawn_detached()` run a recorded run, and
`progress_of()` says what a run's checkpoint holds. The runner reaches the results database only through the
MCP tools (record_run / mark_run in the graph's nodes, list_deployments / teardown in the cleanup).
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
from pathlib import Path
from typing import Any

from worldtune.agent.configuration import Context, TuneOptions
from worldtune.agent.events import CleanupFailed, Events, GoalRead, RecordFailed, Resumed, TornDown, tell
from worldtune.agent.goal_reader import ParsedGoal
from worldtune.agent.record import check_options, first_state, goal_for
from worldtune.agent.tools import Tools
from worldtune.tools.runs.stopping import CONTROLS, RunControl, RunStopped, catch_signals, stop_tuning
from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.run_summary import RunOutcome, RunSummary
from worldtune.tools.words.tuning import Failed

RECURSION_LIMIT = 1000  # the search's own iteration cap stops long before this


def new_run_id() -> str:
    return f"tune-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def _quiet(kind: str, data: dict[str, Any]) -> None:
    del kind, data


# ---- driving the graph -----------------------------------------------------------------------------
async def _drive(
    run_id: str, graph_input: Any, options: TuneOptions, progress: Events, resuming: bool = False
) -> RunOutcome:
    """Run (or resume) the graph to its end or to the approval interrupt; tear down on any early exit.

    The run's record is written through the MCP tools (record_run / mark_run, in the graph's nodes and here), so
    it lives with the server the run drives."""
    from worldtune.agent.checkpoints import async_sqlite_saver
    from worldtune.agent.graph import builder
    from worldtune.agent.tools import connect

    options.checkpoint_path().parent.mkdir(parents=True, exist_ok=True)  # the database's folder, made on first use
    config: Any = {"configurable": {"thread_id": run_id}, "recursion_limit": RECURSION_LIMIT}
    error: BaseException | None = None
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    control = CONTROLS[run_id] = RunControl(run_id, loop, task)
    caught = catch_signals(loop, control)
    try:
        async with (
            async_sqlite_saver(options.checkpoint_path()) as saver,
            connect(str(options.db_file()), options.mcp_url, run_id=run_id) as tools,
        ):
            graph = builder.compile(checkpointer=saver, name="worldtune")
            context = Context(tools=tools, progress=progress)
            if resuming:  # the process serving the tools owns (and heartbeats) the run from now on
                await tools.mark_run(run_id, "running")
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
                await _mark_interrupted(tools, run_id, why, progress)
                await _cleanup(tools, run_id, progress)
            else:
                snapshot = await graph.aget_state(config)
    finally:
        for sig in caught:
            loop.remove_signal_handler(sig)
        CONTROLS.pop(run_id, None)
    if error is not None:  # raised here, outside the MCP session, so it is not wrapped in a task-group error
        raise error
    values = dict(snapshot.values)
    if snapshot.interrupts:
        # the approve node recorded the wait (mark_waiting) before its interrupt, for every driver of the graph
        return RunOutcome(run_id=run_id, status="waiting_for_approval", question=snapshot.interrupts[0].value)
    summary = values.get("summary")  # the finish node has recorded it (MCP mark_run)
    if not isinstance(summary, RunSummary):  # a checkpoint from before the summary was a word: its JSON
        summary = RunSummary.model_validate(summary or {})
    return RunOutcome(run_id=run_id, status="completed", summary=summary)


async def _mark_interrupted(tools: Tools, run_id: str, why: str, progress: Events) -> None:
    """Record the stop (shielded, like the cleanup after it); a record that cannot be written is said, not raised."""
    summary = {"error": why, "resume": f"worldtune resume {run_id}"}
    try:
        await asyncio.shield(tools.mark_run(run_id, "interrupted", summary))
    except Exception as exc:
        tell(progress, RecordFailed(error=str(exc), hint=f"the run's record still reads running: {run_id}"))


async def _cleanup(tools: Tools, run_id: str, progress: Events, settle_s: float = 60.0) -> None:
    """Tear down every live deployment of the run (shielded: it must finish even while cancelled).

    A deploy that was in flight when the run stopped may still be starting in the server's worker
    thread, so the listing is repeated until it stays empty (or `settle_s` passes).
    """

    async def stop_all() -> None:
        deadline = time.monotonic() + settle_s
        quiet = 0
        while quiet < 2 and time.monotonic() < deadline:
            found = await tools.list_deployments(run_id=run_id, alive_only=True)
            quiet = 0 if found else quiet + 1
            for d in found:
                await tools.teardown(d.id)
                tell(progress, TornDown(deployment=d.id, note="run stopped early"))
            await asyncio.sleep(0.5)

    try:
        await asyncio.shield(stop_all())
    except Exception as exc:  # the original error matters more; say what could not be stopped
        tell(progress, CleanupFailed(error=str(exc), hint="worldtune gc, or teardown by id"))


def tune(
    goal: str | ParsedGoal,
    options: TuneOptions | None = None,
    progress: Events = _quiet,
    run_id: str | None = None,
) -> RunOutcome:
    """Run a tuning run to its end (or to the approval question when not --yes); returns the outcome."""
    options = options or TuneOptions()
    parsed = goal if isinstance(goal, ParsedGoal) else goal_for(goal, options)
    run_id = run_id or new_run_id()
    first = first_state(parsed, options, run_id)
    tell(progress, GoalRead(goal=parsed.goal.describe(), assumptions=parsed.assumptions, run_id=run_id))
    return asyncio.run(_drive(run_id, first, options, progress))


def _last_checkpoint(path: Path, run_id: str) -> Any:
    """The run's last checkpoint (LangGraph's StateSnapshot) in the checkpoint file at `path`."""
    from worldtune.agent.checkpoints import sqlite_saver
    from worldtune.agent.graph import builder

    with sqlite_saver(path) as saver:
        return builder.compile(checkpointer=saver).get_state({"configurable": {"thread_id": run_id}})


def checkpointed_options(run_id: str, db_path: str | None = None) -> TuneOptions:
    """The options a run was started with, read from its checkpoint (resume needs nothing else)."""
    path = TuneOptions(db_path=db_path).checkpoint_path()
    if not path.is_file():
        raise InvalidInput("thread_id", run_id, f"a run in {path}", "pass the --db the run used")
    snapshot = _last_checkpoint(path, run_id)
    if not snapshot.values:
        raise InvalidInput("thread_id", run_id, f"the id of a run checkpointed in {path}")
    options = snapshot.values["options"]
    if not isinstance(options, TuneOptions):  # plain JSON: checkpointed before the state carried the words
        why = "its checkpoint predates the typed state: start the goal again with worldtune tune"
        raise InvalidInput("thread_id", run_id, "a run checkpointed by this version of worldtune", why)
    return options.model_copy(update={"db_path": db_path or options.db_path})


def resume(
    run_id: str, db_path: str | None = None, approve: bool | None = None, progress: Events = _quiet
) -> RunOutcome:
    """Continue a run that crashed, was killed or waits for approval (approve answers the question)."""
    from langgraph.types import Command

    options = checkpointed_options(run_id, db_path)
    graph_input: Any = None if approve is None else Command(resume={"approved": approve})
    tell(progress, Resumed(run_id=run_id))
    return asyncio.run(_drive(run_id, graph_input, options, progress, resuming=True))


# ---- the job pattern for the MCP server (tools/runs/tuning_jobs.py records the runs) ------------------------
_THREADS: dict[str, threading.Thread] = {}
_ERRORS: dict[str, str] = {}


def _in_thread(run_id: str, body: Any, failed: Failed) -> None:
    """Run `body()` on a background thread named for the run; its failure is recorded (`failed`), a stop is not."""

    def work() -> None:
        try:
            body()
        except RunStopped:
            pass  # recorded as interrupted by the run itself, after its teardown
        except Exception as exc:
            _ERRORS[run_id] = f"{type(exc).__name__}: {exc}"
            failed(_ERRORS[run_id])

    thread = threading.Thread(target=work, name=f"worldtune-{run_id}", daemon=True)
    _THREADS[run_id] = thread
    thread.start()


def prepare(goal_text: str, options: TuneOptions) -> tuple[str, ParsedGoal]:
    """A new run's id and its goal, read and checked: an ambiguous goal raises GoalQuestion here, before the
    run is recorded or anything starts."""
    check_options(options)
    return new_run_id(), goal_for(goal_text, options)


def run_in_thread(run_id: str, parsed: ParsedGoal, options: TuneOptions, failed: Failed) -> None:
    """Run a recorded run in a background thread of this process. Without options.yes it stops at the approval
    question (answer it with resume_tuning). It ends with the MCP session that started it (stop_session_runs)."""
    _in_thread(run_id, lambda: tune(parsed, options, run_id=run_id), failed)


def spawn_detached(run_id: str, goal_text: str, options: TuneOptions) -> None:
    """A recorded run in its own session and process (agent/detached.py), which outlives the MCP session and the
    server; its output goes to logs/RUN_ID.log next to the database."""
    import subprocess
    import sys

    logs = options.db_file().parent / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with open(logs / f"{run_id}.log", "ab") as log:
        subprocess.Popen(
            [sys.executable, "-m", "worldtune.agent.detached", run_id, options.model_dump_json(), goal_text],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def resume_tuning(run_id: str, approve: bool | None, db_path: str | None, failed: Failed) -> str:
    """Resume a run in a background thread (answering the approval question when `approve` is given)."""
    _in_thread(run_id, lambda: resume(run_id, db_path, approve), failed)
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


def stop_run(run_id: str, reason: str, wait_s: float = 120.0) -> bool:
    """Stop one run this process drives in a thread (its client is gone) and wait for its teardown, at most
    `wait_s`; False when no thread of this process drives it."""
    thread = _THREADS.get(run_id)
    deadline = time.monotonic() + wait_s
    if thread is None or not thread.is_alive():
        return False
    while not stop_tuning(run_id, reason) and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.1)  # its graph has not started yet: ask again once it can be stopped
    _join(run_id, thread, deadline)
    return True


def _join(run_id: str, thread: threading.Thread, deadline: float) -> None:
    """Wait for a run's thread to finish its teardown; a signal meanwhile (the client escalating) does not cut
    the wait short: SIGKILL would, and then gc tears down the rest."""
    while thread.is_alive() and time.monotonic() < deadline:
        try:
            thread.join(timeout=0.2)
        except KeyboardInterrupt:
            stop_tuning(run_id, "signal while the MCP session ended")


def progress_of(run_id: str, db_path: str | None = None) -> dict[str, Any]:
    """What this process knows of a run beyond its record (tools/tuning.Tuner.progress): whether a thread of it
    drives the run, the error that ended it, and what its last checkpoint holds."""
    thread = _THREADS.get(run_id)
    out: dict[str, Any] = {"alive": thread is not None and thread.is_alive(), "error": _ERRORS.get(run_id)}
    try:
        path = TuneOptions(db_path=db_path).checkpoint_path()
        if path.is_file():
            snap = _last_checkpoint(path, run_id)
            values = snap.values or {}
            search, estimate = values.get("search"), values.get("spend_estimate")  # words (agent/state.py)
            out |= {
                "events": (values.get("events") or [])[-20:],
                "spent_usd": search.spent_usd if search else 0.0,
                "measurements": len(search.measurements) if search else 0,
                "stop_reason": values.get("stop_reason"),
                "spend_estimate": estimate.as_json() if estimate else None,
                "waiting_for_approval": bool(snap.interrupts),
            }
    except Exception as exc:  # a checkpoint being written right now: report what the record says
        out["note"] = f"checkpoint not readable now: {exc}"
    return out
