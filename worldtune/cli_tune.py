"""`worldtune tune`, `worldtune resume` and `worldtune report`: the agent from the command line.

LangGraph, the MCP client and matplotlib are imported inside the commands, so the CLI starts fast.
Progress goes to stderr; with --json, stdout carries one JSON object and nothing else.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from worldtune.cli import console, emit_json, err_console, fail, need_extra
from worldtune.tools.words.errors import WorldtuneError

if TYPE_CHECKING:
    from worldtune.tools.words.run_summary import RunOutcome

EXIT_NOT_DONE = 3  # waiting for approval, or stopped without a verified recommendation
EXIT_STOPPED = 130  # stopped by a signal other than a numbered one (128 + signal number otherwise)
EXIT_INFEASIBLE = 4  # the posterior says no candidate meets the goal (stop_kind infeasible; nearest options printed)


def _printer(as_json: bool) -> Any:
    """Progress lines on stderr: what the agent believes, what it will spend and why, what it measured: each event's
    own line (agent/events.py), for the kinds a person reads."""
    from worldtune.agent.events import read_event

    def show(kind: str, data: dict[str, Any]) -> None:
        event = read_event(kind, data)
        line = event.line() if event is not None else None
        if line:
            err_console.print(line)

    return show


def _output(outcome: RunOutcome) -> dict[str, Any]:
    """The --json object (issue 5 item 7's keys, plus where to find the rest)."""
    if outcome.summary is None:
        return {
            "run_id": outcome.run_id,
            "thread_id": outcome.thread_id,
            "status": outcome.status,
            "question": outcome.question,
            "stop_reason": None,
        }
    s = outcome.summary.record()  # the record's JSON, as get_tuning and the report read it
    from worldtune.agent.provenance import of_record

    keys = (
        "goal",
        "recommendation",
        "measured",
        "predicted",
        "spend",
        "spend_estimate",
        "stop_reason",
        "stop_kind",
        "run_id",
        "nearest",
        "rejected",
        "failed",
    )
    # provenance: which figures are simulated (twin) or measured, which model terms are assumed, how far the
    # latency claim goes with n samples, and the prices' snapshot date
    return {
        "status": "completed",
        "thread_id": outcome.thread_id,
        **{k: s.get(k) for k in keys},
        "provenance": of_record(outcome.summary).model_dump(mode="json"),
    }


def _print_outcome(outcome: RunOutcome) -> None:
    """The answer, on stdout (progress went to stderr): the recommendation or why there is none, or the question."""
    from worldtune.agent.provenance import labels, provenance

    s = outcome.summary
    if s is None:  # waiting for approval
        question = outcome.question or {}
        for line in approval_lines(question.get("spend_estimate") or {}):
            console.print(line, markup=False, highlight=False)
        console.print(
            f"approve with: worldtune resume {outcome.thread_id} --yes   (or --no to decline)",
            markup=False,
            highlight=False,
        )
        return
    rec, spend = s.recommendation, s.spend
    if rec is None:
        console.print(f"[bold red]no verified recommendation[/] ({s.stop_kind or 'stopped'}): {s.stop_reason}")
        for o in s.nearest or []:
            console.print(
                f"  nearest: {o['plan']} on {o['gpu']} ({o['stage']}): p95 ~{o['latency_q_s']} s, "
                f"meets {o['would_meet_s']} s at 95%, ${o['usd_per_clip']}/clip"
            )
    else:
        m, p = s.measured, s.predicted
        prov = s.provenance or provenance(s)
        simulated = prov.simulated
        console.print(
            f"[bold green]recommendation[/] {rec.gpu} plan {rec.plan} x {rec.nodes} node(s) "
            f"({rec.replicas} replicas), {rec.capacity} on {rec.offer} at ${rec.usd_per_hour:.2f}/h"
        )
        # A percentile only as tools/stats claims it; a parametric bound by its name and assumption.
        bounds = [f"{k} {v} s" for k, v in m.bounds().items()]
        evidence = f" (n={m.samples}; {m.latency_p95_claim}" if m.samples else ""
        evidence += (f"; {', '.join(bounds)}, {m.parametric_assumption})" if bounds else ")") if evidence else ""
        p95 = m.latency_p95_s if m.latency_p95_s is not None else "not claimable"
        console.print(
            f"  {'simulated on the twin' if simulated else 'measured'}: p50 {m.latency_p50_s} s, "
            f"p95 {p95}{' s' if m.latency_p95_s is not None else ''}{evidence}, "
            f"{m.clips_per_hour_per_node} clips/h/node, ${m.usd_per_clip}/clip"
        )
        console.print(
            f"  predicted before measuring: p50 {p.latency_p50_s} s, {p.clips_per_hour_per_node} clips/h/node, "
            f"${p.usd_per_clip}/clip"
        )
        console.print(f"  why it stopped: {s.stop_reason}")
        for line in labels(prov):
            console.print(f"  [yellow]{escape(line.split(':', 1)[0])}[/]:{escape(line.split(':', 1)[1])}")
    console.print(
        f"  search cost: ${spend.usd:.2f}, {spend.gpu_hours:.2f} GPU-h ({spend.model_seconds:.0f} model-s), "
        f"{spend.deployments} deployments, {spend.benchmarks} benchmarks"
    )
    console.print(f"  report: worldtune report {s.run_id}")


def approval_lines(estimate: dict[str, Any]) -> list[str]:
    """The spend a run asks approval for, in words (it was printed as a Python dict)."""
    if not estimate:
        return ["waiting for approval of the run's spend"]
    basis = estimate.get("priced_as") or "the offers' prices"
    lines = [
        f"waiting for approval: at most ${estimate.get('usd', 0):,.2f} ({estimate.get('gpu_hours', 0):,.2f} GPU-h) of "
        f"the ${estimate.get('budget_usd', 0):,.2f} budget, priced as {basis}",
        f"  at most {estimate.get('deployments', 0)} deployment(s) ({estimate.get('cold_loads', 0)} cold and "
        f"{estimate.get('warm_loads', 0)} warm load(s)), about {estimate.get('answer_hours', 0):.2f} h to a verified "
        f"answer (modelled), {estimate.get('parallel', 1)} candidate(s) at a time",
    ]
    forecast = estimate.get("forecast") or {}
    if forecast:
        lines.append(
            f"  likely ${forecast.get('usd', 0):,.2f} and {forecast.get('answer_hours', 0):.2f} h (simulated: the "
            f"median of {forecast.get('runs', 0)} searches against truths drawn from the belief)"
        )
    if estimate.get("claim_requests"):
        lines.append(
            f"  the claim: {estimate['claim_requests']} requests at {estimate.get('confidence', 0.95):.0%} confidence "
            f"over {estimate.get('claim_lanes', 1)} lane(s)"
        )
    return lines


def register(app: typer.Typer) -> None:
    """Add tune, resume and report to the worldtune command line."""
    app.command("tune")(tune)
    app.command("resume")(resume)
    app.command("report")(report)


def tune(
    goal: Annotated[str, typer.Argument(help='the goal in plain words, e.g. "p95 under 150 s, cheapest per clip"')],
    infra: Annotated[str, typer.Option(help="local | slurm/NAME | kubernetes | a cloud")] = "local",
    engine: Annotated[str, typer.Option(help="twin (modelled server) | vllm-omni (the real one)")] = "twin",
    twin_profile: Annotated[
        list[str] | None,
        typer.Option(
            help="profile the twin runs with (never read by the agent); repeat it, or give a folder, for one "
            "profile per GPU type"
        ),
    ] = None,
    budget: Annotated[float | None, typer.Option(help="most the search may spend, USD")] = None,
    confidence: Annotated[
        float | None,
        typer.Option(
            help="one level for the latency claim and the stopping rule: 0.99 or 99 (default: the goal's, else 95%)"
        ),
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", help="approve the spend estimate without asking")] = False,
    ask: Annotated[
        bool,
        typer.Option(
            "--ask", help="ask before a free run too (the local twin bills nothing: it is not asked by default)"
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object on stdout")] = False,
    db: Annotated[str | None, typer.Option(help="results database (default $WORLDTUNE_DB)")] = None,
    parallel: Annotated[int, typer.Option(help="candidates verified at once on separate deployments")] = 1,
    mcp_url: Annotated[str | None, typer.Option(help="a remote worldtune MCP server (default: in-process)")] = None,
    mcp_token: Annotated[
        str | None,
        typer.Option(
            help="bearer token the --mcp-url server demands (default $WORLDTUNE_MCP_TOKEN; the variable "
            "keeps it out of `ps`)"
        ),
    ] = None,
    time_scale: Annotated[float | None, typer.Option(help="twin only: sleeps / K (300)")] = None,
    reuse_nodes: Annotated[
        bool, typer.Option("--reuse-nodes/--no-reuse-nodes", help="keep a node and change its plan in place")
    ] = True,
) -> None:
    """Find, verify and recommend the cheapest deployment that meets a goal (asks before spending)."""
    need_extra("worldtune tune", "langgraph", "agent", as_json)
    from worldtune.agent.configuration import LOCAL_TWIN_TIME_SCALE, TuneOptions
    from worldtune.agent.goal_reader import GoalQuestion
    from worldtune.agent.record import goal_for
    from worldtune.tools.plans.spend import needs_confirmation

    try:
        _use_token(mcp_token, mcp_url)
        free = not needs_confirmation(infra, engine)  # as start_tuning: a run that bills nothing is not asked
        options = TuneOptions(
            infra=infra,
            engine=engine,
            twin_profile=twin_profile,
            budget_usd=budget,
            yes=yes or (free and not ask),
            db_path=db,
            parallel=parallel,
            mcp_url=mcp_url,
            reuse_nodes=reuse_nodes,
            confidence=confidence / 100.0 if confidence is not None and confidence > 1 else confidence,
            # `or` would read --time-scale 0 as unset (300): only a missing option takes the default
            time_scale=(LOCAL_TWIN_TIME_SCALE if engine == "twin" else 1.0) if time_scale is None else time_scale,
        )
        options.checkpoint_path()  # the database and its checkpoints file, checked before anything is created
        parsed = goal_for(goal, options)
    except GoalQuestion as exc:
        raise fail(exc, as_json, {"questions": exc.questions}) from exc
    except (WorldtuneError, ValueError) as exc:
        raise fail(exc, as_json) from exc
    if not yes and sys.stdin.isatty() and not as_json:
        err_console.print(f"[bold]goal[/] {parsed.goal.describe()}")
        for note in parsed.assumptions:
            err_console.print(f"  [yellow]assumed[/] {note}")
    _finish(_run_tune(parsed, options, as_json), as_json)


def _release(run_id: str, db: str | None) -> None:
    """Resuming a run its MCP client left (abandoned) takes it over: its starts are no longer refused."""
    from worldtune.tools.runs import run_heartbeat
    from worldtune.tools.store.database import Store

    store = Store(db)
    if store.get_run(run_id) is not None and run_heartbeat.release(store, run_id):
        err_console.print(f"{run_id}: resumed here; it no longer belongs to the MCP client that started it")


def _use_token(token: str | None, mcp_url: str | None) -> None:
    """--mcp-token: sent by this process's MCP client (agent/tools_client.py reads $WORLDTUNE_MCP_TOKEN); never
    written to the run's checkpoint or record."""
    from worldtune.agent.tools_client import TOKEN_ENV
    from worldtune.tools.words.errors import InvalidInput

    if token is None:
        return
    if not mcp_url:
        raise InvalidInput("mcp_token", "(given)", "only with --mcp-url (the in-process tools need no token)")
    if not token.strip() or any(c.isspace() for c in token):
        raise InvalidInput("mcp_token", "(given)", "a bearer token without spaces, as the server was started with")
    os.environ[TOKEN_ENV] = token


def _run_tune(parsed: Any, options: Any, as_json: bool) -> RunOutcome:
    """Run the agent (asking on a terminal when it waits for approval), then plan the fleet for a traffic goal."""
    from worldtune.agent.runner import resume as run_resume
    from worldtune.agent.runner import tune as run_tune
    from worldtune.tools.runs.stopping import RunStopped

    db = options.db_path
    try:
        outcome = run_tune(parsed, options, progress=_printer(as_json))
        if outcome.status == "waiting_for_approval" and sys.stdin.isatty() and not as_json:
            _print_outcome(outcome)
            if typer.confirm("Spend it?", default=False):
                outcome = run_resume(outcome.run_id, db, True, progress=_printer(as_json))
        summary = outcome.summary
        if summary is not None and parsed.goal.traffic is not None:  # issue 17: a fleet for it
            from worldtune.agent.fleet_step import fleet_for, record_fleet

            fleet = fleet_for(
                parsed.goal,
                options.infra,
                options.engine,
                options.time_scale,
                db,
                _printer(as_json),
                twin_profiles=options.twin_profiles(),
                learned_profiles=summary.learned_profiles,
                mcp_url=options.mcp_url,
                recommended=str(summary.recommendation.plan) if summary.recommendation else None,
            )
            outcome = outcome.model_copy(update={"fleet": fleet.model_dump(mode="json") if fleet else None})
            # the report draws its day; over MCP, so a remote run's fleet is kept by its server
            record_fleet(outcome.run_id, fleet, db, options.mcp_url)
    except RunStopped as exc:
        raise _stopped(exc, as_json) from exc
    except (WorldtuneError, ValueError) as exc:
        raise fail(exc, as_json) from exc
    return outcome


def resume(
    thread_id: Annotated[str, typer.Argument(help="the run id tune printed (= its checkpoint thread id)")],
    yes: Annotated[bool, typer.Option("--yes", help="approve the spend if the run waits for approval")] = False,
    no: Annotated[bool, typer.Option("--no", help="decline the spend (nothing starts)")] = False,
    db: Annotated[str | None, typer.Option(help="results database the run used")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object on stdout")] = False,
) -> None:
    """Continue a run that crashed, was killed or waits for approval, without repeating finished measurements."""
    need_extra("worldtune resume", "langgraph", "agent", as_json)
    from worldtune.agent.runner import resume as run_resume
    from worldtune.tools.runs.stopping import RunStopped

    approve = True if yes else (False if no else None)
    try:
        _release(thread_id, db)
        outcome = run_resume(thread_id, db, approve, progress=_printer(as_json))
    except RunStopped as exc:
        raise _stopped(exc, as_json) from exc
    except (WorldtuneError, ValueError) as exc:
        raise fail(exc, as_json) from exc
    _finish(outcome, as_json)


def report(
    run_id: Annotated[str, typer.Argument(help="the run id tune printed")],
    out: Annotated[str | None, typer.Option(help="folder for the HTML, plots, JSON and YAML")] = None,
    db: Annotated[str | None, typer.Option(help="results database the run used")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the written paths as JSON")] = False,
) -> None:
    """Write the run's report: an HTML page, PNG plots, the JSON record and the deployment's YAML."""
    need_extra("worldtune report", "matplotlib", "agent", as_json)
    from worldtune.agent.report import write_report
    from worldtune.tools.results.report_data import report_data
    from worldtune.tools.store.db_path import check_out_folder

    try:
        if out:
            check_out_folder(out)
        written = write_report(report_data(run_id, db), out)
    except (WorldtuneError, ValueError) as exc:
        raise fail(exc, as_json) from exc
    if as_json:
        emit_json(written)
    else:
        for name, path in written.items():
            err_console.print(f"{name}: {path}")


def _stopped(exc: Any, as_json: bool) -> typer.Exit:
    """A run stopped by SIGINT/SIGTERM/SIGHUP after its teardown: say so, exit 128 + the signal's number."""
    if as_json:
        emit_json(
            {
                "run_id": exc.run_id,
                "thread_id": exc.run_id,
                "status": "interrupted",
                "reason": exc.reason,
                "resume": f"worldtune resume {exc.run_id}",
            }
        )
    err_console.print(f"[bold yellow]stopped[/] {exc}")
    return typer.Exit(128 + exc.signum if exc.signum else EXIT_STOPPED)


def _finish(outcome: RunOutcome, as_json: bool) -> None:
    if as_json:
        emit_json(_output(outcome) | ({"fleet": outcome.fleet} if outcome.fleet else {}))
    else:
        _print_outcome(outcome)
        if outcome.fleet:
            from worldtune.agent.fleet_step import fleet_lines
            from worldtune.tools.deployments.fleet_rehearsal import FleetOutcome

            for line in fleet_lines(FleetOutcome.model_validate(outcome.fleet)):
                console.print(line, markup=False, highlight=False)
    summary = outcome.summary
    if summary is not None and summary.stop_kind == "infeasible":
        raise typer.Exit(EXIT_INFEASIBLE)
    if summary is None or summary.recommendation is None:
        raise typer.Exit(EXIT_NOT_DONE)
