"""The run's record: the goal as the run uses it, its first state, its marks in the results database, and
the summary written when it ends (goal, recommendation, measured against predicted, spend, every candidate).

The graph's nodes (read_goal, approve, finish) and the runner write the record through here, with the MCP tools
record_run and mark_run, so a run that Studio or `langgraph dev` drives without the runner is recorded the same
way, and a run against a remote server (`--mcp-url`) is recorded on that server, beside its deployments.
"""

from __future__ import annotations

from typing import Any

from worldtune.agent.configuration import TuneOptions
from worldtune.agent.goal_parser import read_goal
from worldtune.agent.goal_reader import ParsedGoal
from worldtune.agent.provenance import provenance
from worldtune.agent.state import Outcome, TuneState, answer_seconds
from worldtune.agent.tools import Tools
from worldtune.policies.search import Candidate, SearchState, candidates, hardware_key, recommendation
from worldtune.tools.words.deployment import Deployment
from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.goal import Goal
from worldtune.tools.words.run_summary import (
    CandidateRow,
    Figures,
    Recommendation,
    RecordedGoal,
    RunOptions,
    RunSummary,
    Spend,
)


def goal_for(goal_text: str, options: TuneOptions) -> ParsedGoal:
    """The goal as the run will use it: the command line's budget and cloud win over the text."""
    from worldtune.tools.plans.spend import check_tuning
    from worldtune.tools.words.infra import Infra

    where = Infra.parse(options.infra)
    check_tuning(str(where), options.engine, options.budget_usd)  # a bad infra or budget: refused before parsing
    parsed = read_goal(goal_text, budget_usd=options.budget_usd, infras=[where.name] if where.kind == "cloud" else None)
    if options.budget_usd is None:  # a budget in the goal's words is bound like the argument
        check_tuning(str(where), options.engine, parsed.goal.budget_usd, "goal budget")
    if options.confidence is not None:  # --confidence wins over the goal's words, checked as the goal checks it
        goal = Goal.model_validate({**parsed.goal.model_dump(), "confidence": options.confidence})
        parsed = parsed.model_copy(update={"goal": goal})
    return parsed


def check_options(options: TuneOptions) -> None:
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
        from worldtune.tools.plans.profile_paths import load_profile

        for path in options.twin_profiles():  # each file given, or each profile in a folder given
            load_profile(path, "cli", "twin_profile")


async def open_record(tools: Tools, run_id: str, goal: dict[str, Any]) -> None:
    """The run's record opened (MCP record_run): running, owned by the process serving the tools."""
    await tools.record_run(run_id, goal)


async def mark_waiting(tools: Tools, run_id: str, spend_estimate: dict[str, Any] | None) -> None:
    """The run waits for its spend to be approved: nothing is started, so its owner lets go meanwhile."""
    await tools.mark_run(run_id, "waiting_for_approval", {"spend_estimate": spend_estimate})


async def mark_approved(tools: Tools, run_id: str) -> None:
    """The spend is approved: the run is running again, owned by the process serving the tools."""
    await tools.mark_run(run_id, "running")


async def write_record(tools: Tools, run_id: str, summary: RunSummary) -> None:
    """The run's record, completed: its owner lets go (whoever drove the graph: the runner or Studio)."""
    await tools.mark_run(run_id, "completed", summary.record())


def first_state(parsed: ParsedGoal, options: TuneOptions, run_id: str) -> TuneState:
    """A run's first state: what `tune` and the graph's read_goal start from (read_goal records it)."""
    check_options(options)
    return TuneState(
        run_id=run_id,
        goal_text=parsed.text,
        goal=parsed.goal,
        goal_source=parsed.source,
        options=options,
        results=[],
        events=[f"goal: {parsed.goal.describe()} (read by the {parsed.source})"],
    )


def _figures(goal: Goal, cand: Candidate | None, latencies: list[float] | None = None) -> Figures:
    """The record's figures: a measured percentile only as tools/stats claims it (order statistics when n allows;
    else null, with the named parametric bound and its assumption beside it)."""
    if cand is None:
        return Figures(latency_p50_s=None, latency_p95_s=None, clips_per_hour_per_node=None, usd_per_clip=None)
    out = Figures(
        latency_p50_s=round(cand.latency_s, 2),
        latency_p95_s=round(cand.latency_s * (1 + 1.645 * 0.002), 2),
        clips_per_hour_per_node=round(cand.clips_per_hour_per_node, 3),
        usd_per_clip=round(cand.usd_per_clip, 4),
    )
    if latencies:
        from worldtune.tools.words import stats

        # one confidence for the claim and the stop: the goal's (tools/words/goal.py)
        p95 = stats.percentile_verdict(latencies, 95, goal.confidence)
        out.latency_p95_s = round(p95.upper, 2) if p95.upper is not None else None
        out.latency_p95_claim = "claimable (order statistics)" if p95.claimable else p95.note
        out.claim_confidence = goal.confidence
        verdict = stats.percentile_verdict(latencies, goal.latency_percentile, goal.confidence)
        if verdict.parametric_upper is not None:
            setattr(out, verdict.parametric_name, round(verdict.parametric_upper, 2))  # an extra field, by its name
            out.parametric_assumption = verdict.parametric_assumption
        out.samples = len(latencies)
    return out


def build_summary(state: TuneState, deployments: list[Deployment]) -> RunSummary:
    """The run's record: goal, recommendation, measured vs predicted, spend, stop reason, every candidate."""
    goal, options = state["goal"], state["options"]
    search = state.get("search")
    results = list(state.get("results") or [])
    estimate, decision = state.get("spend_estimate"), state.get("decision")
    summary = RunSummary(
        run_id=state["run_id"],
        thread_id=state["run_id"],
        goal=RecordedGoal(**goal.model_dump(), text=state.get("goal_text", ""), description=goal.describe()),
        goal_source=state.get("goal_source", "parser"),
        options=RunOptions.model_validate(options.model_dump(mode="json")),
        stop_reason=state.get("stop_reason") or "stopped",
        stop_kind=state.get("stop_kind") or "",
        recommendation=None,
        measured=_figures(goal, None),
        predicted=_figures(goal, None),
        spend=_spend(search, goal, options, deployments, results),
        spend_estimate=estimate.as_json() if estimate else None,
        decision=decision.model_dump(mode="json") if decision else None,
        events=list(state.get("events") or []),
        measurements=[r.as_json() for r in results],
        candidates=[],
    )
    if search is not None:
        summary.rejected = [r.model_dump(mode="json") for r in search.rejected]
        summary.failed = dict(search.failures)
        summary.nearest = summary.decision["nearest"] if summary.decision else []
        # what the run's measurements taught it, per GPU type: the fleet step plans a goal's traffic with these
        summary.learned_profiles = {g: search.beliefs[g].model_dump(mode="json") for g in search.posteriors}
        _add_candidates_and_recommendation(summary, state, search, goal)
    summary.provenance = provenance(summary)  # what is simulated, measured, assumed; how prices are dated
    return summary


def _spend(
    search: SearchState | None,
    goal: Goal,
    options: TuneOptions,
    deployments: list[Deployment],
    results: list[Outcome],
) -> Spend:
    """What the search spent: GPU-hours, dollars, deployments, plan changes in place, benchmarks, time to answer."""
    model_s = sum(r.model_s for r in results)
    return Spend(
        gpu_hours=round(search.spent_gpu_hours, 4) if search else 0.0,
        usd=round(search.spent_usd, 4) if search else 0.0,
        budget_usd=goal.budget_usd,
        deployments=len(deployments),
        replans=sum(len(d.previous_plans) for d in deployments),
        benchmarks=sum(len(r.measurement.benchmarks()) for r in results),
        model_seconds=round(model_s, 1),
        # time to a verified answer on real infra: provisioning, loads and requests; one after another with
        # --parallel 1, else the verifications of one round overlap (assumed: evenly over the lanes)
        answer_hours=round(answer_seconds(results, options.parallel) / 3600.0, 3),
        lanes=max((r.measurement.lanes for r in results if r.measurement.kind == "full"), default=0),
        full_requests=sum(len(r.measurement.latencies_s) for r in results if r.measurement.kind == "full"),
        confidence=goal.confidence,
        answer_basis=("modelled: the twin's model-seconds" if options.twin else "wall time of the rented nodes")
        + ("" if options.parallel == 1 else f", divided over {options.parallel} parallel lanes (assumed even)"),
        priced_as="offer price x modelled GPU seconds (twin)" if options.twin else "offer price x wall time",
    )


def _add_candidates_and_recommendation(summary: RunSummary, state: TuneState, search: SearchState, goal: Goal) -> None:
    """Every candidate as believed before measuring and now, and the recommendation with its measured and
    predicted figures."""
    initial = search.model_copy(
        update={
            "beliefs": dict(state.get("initial_beliefs") or {}) or search.beliefs,
            "posteriors": {},
            "measurements": [],
        }
    )
    before = {c.key: c for c in candidates(initial)}
    now = candidates(search)
    summary.candidates = [
        CandidateRow(
            key=c.key,
            gpu=c.gpu,
            plan=c.plan,
            offer=c.offer.id,
            capacity=c.capacity,
            usd_per_hour=c.offer.usd_per_hour,
            nodes=c.nodes,
            stage=c.stage,
            feasible=c.feasible,
            latency_s=c.latency_s,
            latency_q_s=c.latency_q_s,
            clips_per_hour_per_node=c.clips_per_hour_per_node,
            usd_per_clip=c.usd_per_clip,
            predicted_latency_s=before[c.key].latency_s if c.key in before else None,
            predicted_usd_per_clip=before[c.key].usd_per_clip if c.key in before else None,
            predicted_clips_per_hour_per_node=before[c.key].clips_per_hour_per_node if c.key in before else None,
        )
        for c in now
    ]
    best = recommendation(search)
    if best is not None:
        latencies = [
            x for m in search.measurements if hardware_key(m.key) == hardware_key(best.key) for x in m.latencies_s
        ]
        summary.recommendation = Recommendation(
            key=best.key,
            gpu=best.gpu,
            plan=best.plan,
            replicas=best.replicas,
            replicas_per_node=best.replicas // best.nodes,
            nodes=best.nodes,
            capacity=best.capacity,
            offer=best.offer.id,
            usd_per_hour=best.offer.usd_per_hour,
            offer_detail=best.offer,
        )
        summary.measured = _figures(goal, best, latencies)
        summary.predicted = _figures(goal, before.get(best.key))
