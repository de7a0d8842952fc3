"""The claim's full run, in lanes, stopped once decided: part of the `verify` node (agent/verify.py).

The search's full-run action says how many lanes (deployments of the candidate's plan on its offer) and how many
requests each takes (policies/search/lanes.py). The first lane is the deployment verify readied; the others are
deployed here, together, through the MCP deploy tool (one cluster each on SkyPilot, one set of twins locally,
one Deployment on Kubernetes). Samples pool into one claim only from lanes of the same plan, offer, engine and
twin profile; a lane that does not deploy, or whose deployment stops being ready mid-run (preempted, killed), is
dropped with the reason: its answered samples are kept, its unanswered requests are run again on a surviving
lane afterwards. As samples arrive the claim is checked (tools/words/stats.check_claim): once more samples lie
above the goal's bound than the claim over its needed count allows, every lane is torn down at once and the
measurement says why (`decided`); the run asks for exactly the needed count, so a met claim buys nothing more.
Its GPU seconds are every lane's start and busy time; its wall seconds (the time to answer) the slowest lane's.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from typing import Any

from langgraph.runtime import Runtime

from worldtune.agent.configuration import Context, TuneOptions
from worldtune.agent.events import Decided, Deploying, FullRun, Lanes, Measured
from worldtune.agent.state import Outcome, VerifyTask
from worldtune.agent.steps import (
    Verification,
    bill,
    busy_model_s,
    cannot_measure,
    deploy_request,
    deploy_within,
    emit,
    every_request_failed,
    failed_update,
    lease_hours,
    measured_figures,
    measurement_of,
    relaunched_start_s,
    replan,
    samples_of,
    start_s,
    teardown,
)
from worldtune.agent.tools import BenchmarkRequest, Tools
from worldtune.agent.tools_client import ToolCallFailed
from worldtune.policies.search import Action, Candidate, full_requests, offer_of
from worldtune.tools.mcp.results import ResultRecord
from worldtune.tools.words import stats
from worldtune.tools.words.deployment import Deployment
from worldtune.tools.words.workload import anchor_changes

POLL_S = 0.2  # how often the lanes' benchmarks are read (wall seconds)
ENGINE_CHECK_S = 2.0  # how often each lane's deployment is asked whether the engine still runs


@dataclass
class Lane:
    """One deployment of the claim's run: its requests, benchmarks, samples, and why it was dropped."""

    deployment: Deployment
    start_s: float  # GPU seconds its start cost
    requests: int
    benches: list[str] = field(default_factory=list)
    records: dict[str, ResultRecord] = field(default_factory=dict)
    looks: dict[str, tuple[object, ...]] = field(default_factory=dict)  # per benchmark: its status when last read
    running: bool = False
    dropped: str = ""
    cut_s: float | None = None  # on a twin, the claim's decision on the run's model clock: later answers do not count

    def latencies(self, cand: Candidate) -> list[float]:
        if self.cut_s is None:
            return [x for b, r in self.records.items() for x in measurement_of(cand, "full", b, r).latencies_s]
        return [latency for done, _, latency in self.timed() if latency is not None and done <= self.cut_s]

    def busy_s(self) -> float:
        if self.cut_s is None:
            return sum(busy_model_s(r) for r in self.records.values())
        cut = self.cut_s
        return max((min(cut, done) for done in replica_clocks(self.timed()).values()), default=0.0)

    def timed(self) -> list[tuple[float, str, float | None]]:
        """Every answer of the run on the lane's model clock: (when it was done, model seconds since the run
        began, on its replica: that replica's server seconds so far; its replica; its latency, None if it
        failed). The server's seconds are the twin's modelled stage times, so this clock is the same on an idle
        and on a loaded machine, whatever order the lanes' answers reached us in."""
        busy: dict[str, float] = {}
        out: list[tuple[float, str, float | None]] = []
        for record in self.records.values():
            full = (s for s in samples_of(record) if s.phase == "full" and s.counts())  # as measurement_of
            for sample in sorted(full, key=lambda s: s.seq):
                took = float(sample.client_time() or 0.0)
                busy[sample.endpoint] = busy.get(sample.endpoint, 0.0) + took
                out.append((busy[sample.endpoint], sample.endpoint, took if sample.ok else None))
        return out


def replica_clocks(timed: list[tuple[float, str, float | None]]) -> dict[str, float]:
    """Each replica's model clock from a lane's timed answers: the server seconds of those it has given so far
    (its last answer's time; each replica's times only grow)."""
    return {endpoint: done for done, endpoint, _ in timed}


def pool_key(d: Deployment) -> tuple[str, str, str, str]:
    """What samples must share to pool into one claim: plan, offer, engine (and the twin's profile)."""
    return str(d.plan), d.offer.id if d.offer else d.gpu, d.engine, d.twin_profile or ""


def _shares(task: VerifyTask, action: Action) -> list[int]:
    """The requests each lane of the claim's run takes: the action's split when it adds up to the run, else one."""
    n = action.requests or full_requests(task["goal"])
    return action.lane_requests if sum(action.lane_requests) == n else [n]


def _spares(task: VerifyTask, cand: Candidate) -> list[str]:
    """The run's spare nodes on the candidate's offer (launched with a probe for this claim's run)."""
    return [d for d, key in (task.get("spare_lanes") or {}).items() if offer_of(key) == cand.offer.id]


def lanes_to_launch_with_the_first(task: VerifyTask, cand: Candidate, action: Action) -> int:
    """The extra lanes of a claim's run whose first node is launched now (none live, no spare of its offer): they
    are launched with it, not after it, as the time to answer counts them (each lane's start overlaps the others')."""
    if action.kind != "full" or task["deployment_id"] or not action.needs_deploy or _spares(task, cand):
        return 0
    return len(_shares(task, action)) - 1


async def launch_lanes(v: Verification, count: int) -> list[tuple[Deployment, float] | str]:
    """`count` more deployments of the candidate at once (each: the deployment and its start's GPU seconds, or why
    it failed)."""
    return list(await asyncio.gather(*(_deploy_lane(v, v.cand, f"lane {i}") for i in range(count))))


def with_lanes_billed(
    update: dict[str, Any], cand: Candidate, launched: list[tuple[Deployment, float] | str]
) -> dict[str, Any]:
    """A failed action's update with the starts of the lanes launched beside it billed too (they were torn down)."""
    seconds = sum(got[1] for got in launched if not isinstance(got, str))
    if not seconds or not update.get("results"):
        return update
    usd, gpu_hours = bill(cand, seconds)
    (outcome, *rest) = update["results"]
    m = outcome.measurement
    measured = m.model_copy(update={"usd": m.usd + usd, "gpu_hours": m.gpu_hours + gpu_hours})
    return update | {"results": [outcome.model_copy(update={"measurement": measured}), *rest]}


async def full_run(
    v: Verification,
    first: Deployment,
    first_charged_s: float,
    ahead: list[tuple[Deployment, float] | str] | None = None,
) -> dict[str, Any]:
    """The action's full run over its lanes, checked as samples arrive; verify's update (an Outcome). `ahead`: lanes
    launched together with the first (lanes_to_launch_with_the_first)."""
    task, runtime, cand, action, cap_s = v.task, v.runtime, v.cand, v.action, v.cap_s
    n = action.requests or full_requests(task["goal"])
    shares = _shares(task, action)
    lanes = [Lane(first, first_charged_s, shares[0])]
    events: list[str] = []
    spares = _spares(task, cand)
    taken = await asyncio.gather(*(_spare_lane(v, d) for d in spares[: len(shares) - 1]))
    for d in spares[len(shares) - 1 :]:  # more were launched than the run now deals requests to
        await teardown(runtime, d)
    ready = [got for got in taken if not isinstance(got, str)] + list(ahead or [])
    events += [got for got in taken if isinstance(got, str)]
    more = len(shares) - 1 - len(ready)
    extra = ready + await launch_lanes(v, more)
    for share, got in zip(shares[1:], extra, strict=True):
        if isinstance(got, str):  # not deployed: its requests go to the first lane
            events.append(f"lane dropped before its run: {got}")
            lanes[0].requests += share
        elif pool_key(got[0]) != pool_key(first):
            events.append(f"lane {got[0].id} dropped: {pool_key(got[0])} is not {pool_key(first)}, samples do not pool")
            await teardown(runtime, got[0].id)
            lanes[0].requests += share
        else:
            lanes.append(Lane(got[0], got[1], share))
    emit(runtime, Lanes(key=cand.key, lanes=len(lanes), requests=[lane.requests for lane in lanes]))
    decided = await _run(v, lanes)
    live = [lane for lane in lanes if not lane.dropped]
    short = n - sum(len(lane.latencies(cand)) for lane in lanes)
    if not decided and short > 0 and live and any(lane.dropped for lane in lanes):
        live[0].requests, live[0].running = short, False  # the dropped lanes' unanswered requests, run again
        events.append(f"{short} request(s) of dropped lane(s) run again on {live[0].deployment.id}")
        decided = await _run(v, [live[0]])
    for lane in lanes[1:]:  # the extra lanes are freed at once; the first is the candidate's deployment
        if not lane.dropped:
            await teardown(runtime, lane.deployment.id)
    events += [f"lane {lane.deployment.id} dropped: {lane.dropped}" for lane in lanes if lane.dropped]
    update = await _outcome(runtime, cand, action, lanes, n, decided, cap_s, events)
    return update | {"spare_lanes": dict.fromkeys(spares, "")}  # used or torn down: no longer spare


async def _spare_lane(v: Verification, deployment_id: str) -> tuple[Deployment, float] | str:
    """A spare node launched with the probe before this run, as a lane: its start was billed with that probe; a
    node of another plan is replanned to this one (a warm load, billed here). Why not, when it cannot serve."""
    runtime, cand, action, options = v.runtime, v.cand, v.action, v.options
    try:
        d = await v.tools.get_deployment(deployment_id)
    except ToolCallFailed as exc:
        return f"spare node {deployment_id} unreadable: {exc}"
    if d.state == "ready" and d.plan == cand.plan:
        return d, 0.0
    if d.state == "ready":
        moved = await replan(runtime, deployment_id, cand, lease_hours(action, options, math.inf))
        if moved is not None:
            return moved, start_s(moved, cand, options)
    await teardown(runtime, deployment_id)
    return f"spare node {deployment_id} is {d.state}: not a lane of {cand.plan}"


async def launch_early(v: Verification) -> list[tuple[Deployment, float] | str]:
    """The probe's early lanes (policies/search/lanes.early_lanes): `action.early_lanes` new nodes of its offer
    under `action.early_plan`, launched together with the probe so that their provisioning and cold load overlap
    it; each (deployment, GPU seconds its start cost) or why it failed. Their lease covers the probe and the
    claim's whole run on one lane (what they may be kept for)."""
    task, cand, action, options = v.task, v.cand, v.action, v.options
    plan = action.early_plan or cand.plan
    lane = cand.model_copy(update={"plan": plan, "key": f"{cand.offer.id}|{plan}"})
    scale = options.time_scale if options.twin else 1.0
    await asyncio.sleep(action.early_after_s / scale)  # late enough in the probe to be up when it ends
    run_s = action.expected_s + full_requests(task["goal"]) * cand.latency_s
    hours = round(max(options.hold_hours, 1.5 * run_s / scale / 3600.0), 4)
    return list(await asyncio.gather(*(_deploy_lane(v, lane, f"early {i}", hours) for i in range(action.early_lanes))))


def with_early(
    cand: Candidate,
    update: dict[str, Any],
    launched: list[tuple[Deployment, float] | str],
    held: int = 0,
    after_s: float = 0.0,
) -> dict[str, Any]:
    """The probe's update with its early lanes, launched `after_s` model seconds into it: each billed from its
    launch until it is up or the probe ends, whichever is later (it waits for the run), the probe's time to
    answer the longer of the two; the nodes that came up join the run's spare lanes. `held` spare nodes kept
    up through the probe are billed for it."""
    up = [got for got in launched if not isinstance(got, str)]
    events = [f"early lane not started: {got}" for got in launched if isinstance(got, str)]
    results = list(update.get("results") or [])
    if not results or not (up or held):
        return update | {"events": [*update.get("events", []), *events]}
    probe = results[0]
    probe_s = probe.model_s
    lanes_s = sum(max(start, probe_s - after_s) for _, start in up) + held * probe_s
    usd, gpu_hours = bill(cand, lanes_s)
    m = probe.measurement
    measured = m.model_copy(update={"usd": m.usd + usd, "gpu_hours": m.gpu_hours + gpu_hours})
    wall = max([probe.answer_s] + [after_s + start for _, start in up])
    results[0] = probe.model_copy(update={"measurement": measured, "model_s": probe_s + lanes_s, "wall_s": wall})
    events.append(
        f"{len(up)} early lane(s) of {cand.offer.id} up, {held} spare(s) kept, for the claim's run (${usd:.2f})"
    )
    return update | {
        "results": results,
        "spare_lanes": {d.id: f"{cand.offer.id}|{d.plan}" for d, _ in up},
        "events": [*update.get("events", []), *events],
    }


async def _deploy_lane(
    v: Verification, cand: Candidate, role: str, hours: float | None = None
) -> tuple[Deployment, float] | str:
    """One more deployment of `cand` (the action's candidate, or an early lane's plan on its offer) for the run (its
    GPU seconds to start), or why it failed. `role` (which lane) seeds a twin's noise: every lane draws its own, the
    same in every run of the same decisions."""
    task, runtime, action, options = v.task, v.runtime, v.action, v.options
    lease = hours if hours is not None else lease_hours(action, options, math.inf)
    request = deploy_request(cand, options, task, lease, role)
    emit(runtime, Deploying(key=cand.key, plan=str(cand.plan), gpu=cand.gpu, infra=options.infra, lane=True))
    try:
        d = await deploy_within(runtime, request, None)
    except (ToolCallFailed, TimeoutError) as exc:
        return f"deploy failed: {exc}"
    return d, start_s(d, cand, options)


async def _run(v: Verification, lanes: list[Lane]) -> str:
    """Start every lane's benchmark, follow them, check the claim as samples arrive; why it stopped early or ''."""
    task, runtime, cand, options, cap_s = v.task, v.runtime, v.cand, v.options, v.cap_s
    tools = v.tools
    goal = task["goal"]
    replicas = cand.plan.replicas
    for lane in lanes:
        request = BenchmarkRequest(
            steps=goal.workload.steps,
            repeats=max(1, math.ceil(lane.requests / replicas)),
            concurrency=[replicas],
            workload=anchor_changes(goal.workload),
        )
        try:
            status = await tools.start_benchmark(lane.deployment.id, task["run_id"], request)
        except ToolCallFailed as exc:
            lane.dropped = f"benchmark refused: {exc}"
            continue
        lane.benches.append(status.id)
        lane.running = True
        emit(runtime, FullRun(key=cand.key, deployment=lane.deployment.id, requests=lane.requests))
    looked = started = time.time()
    while any(lane.running for lane in lanes):
        check_engine = time.time() - looked >= ENGINE_CHECK_S
        looked = time.time() if check_engine else looked
        for lane in [lane for lane in lanes if lane.running]:
            bench = lane.benches[-1]
            status = await tools.get_benchmark(bench, wait_s=POLL_S / len(lanes))
            # its samples are read again only when its status says something changed (every sample read at every
            # look was the claim's largest cost: a 59-request run reads back ~25 KB each time)
            look = (status.status, status.samples_done, status.progress, status.message)
            if lane.looks.get(bench) != look:
                lane.records[bench] = await tools.get_result(bench, include_samples=True)
                lane.looks[bench] = look
            ended = status.status != "running"
            if ended and status.status != "completed":
                lane.dropped = f"benchmark {bench} {status.status}: {status.error}"
            if (ended or check_engine) and not lane.dropped:  # killed: its answers so far are kept
                state = await _state(tools, lane.deployment.id)
                if cannot_measure(state, benchmark_running=not ended):
                    lane.dropped = f"deployment {lane.deployment.id} is {state} during benchmark {bench}"
            if ended:
                await _relaunches_billed(tools, lane, cand, options)
            lane.running = not ended and not lane.dropped
        if goal.latency_bound_s is not None and options.twin:
            decision = _decided_on_model_clock(lanes, goal, replicas)
            if decision is not None:
                cut_s, reason = decision
                for lane in lanes:
                    await teardown(runtime, lane.deployment.id)  # stop at once: every lane is freed
                    lane.running, lane.cut_s = False, cut_s
                emit(runtime, Decided(key=cand.key, reason=reason, at_model_s=round(cut_s, 1)))
                return reason
        if goal.latency_bound_s is not None and not options.twin:  # real GPUs: what has answered, in wall order
            pooled = [x for lane in lanes for x in lane.latencies(cand)]
            check = stats.check_claim(pooled, goal.latency_percentile, goal.confidence, goal.latency_bound_s)
            if check.state == "failed":
                for lane in lanes:
                    await teardown(runtime, lane.deployment.id)  # stop at once: every lane is freed
                    lane.running = False
                for lane in [lane for lane in lanes if lane.benches]:  # answers that came in meanwhile are kept
                    bench = lane.benches[-1]
                    lane.records[bench] = await tools.get_result(bench, include_samples=True)
                emit(runtime, Decided(key=cand.key, reason=check.reason))
                return check.reason
        # real GPUs bill wall time on every lane: stop the moment this action's share is used up
        if not options.twin and (time.time() - started) * len(lanes) >= cap_s:
            for lane in lanes:
                lane.running = False
            return "over"
    return ""


def _decided_on_model_clock(lanes: list[Lane], goal: Any, replicas: int) -> tuple[float, str] | None:
    """On a twin: the model time at which the claim failed and why, once that is settled; else None.

    The pooled answers are taken in the order they were done on the lanes' model clocks (not the order they
    reached us, which a loaded machine shuffles): the claim fails at the answer that puts one more sample above
    the bound than it allows. That is settled once every lane still running has answered past that time on every
    replica (an earlier answer above the bound could still come from a lagging lane); until then the run goes on.
    Only the answers done by then count, and each lane is billed up to then: the same figures on an idle and on a
    loaded machine."""
    bound = goal.latency_bound_s
    timed = [lane.timed() for lane in lanes]  # each lane's samples read once a poll
    answers = sorted((done, latency) for each in timed for done, _, latency in each if latency is not None)
    allowed = stats.check_claim([], goal.latency_percentile, goal.confidence, bound).allowed_above
    above = 0
    cut_s: float | None = None
    for done, latency in answers:
        above += latency > bound
        if above > allowed:
            cut_s = done
            break
    if cut_s is None:
        return None
    for lane, each in zip(lanes, timed, strict=True):
        if not lane.running:
            continue
        clock = replica_clocks(each)
        if len(clock) < replicas or min(clock.values()) < cut_s:
            return None  # a replica of a running lane has not yet answered past the cut
    pooled = [latency for done, latency in answers if done <= cut_s]
    check = stats.check_claim(pooled, goal.latency_percentile, goal.confidence, bound)
    return cut_s, check.reason


async def _relaunches_billed(tools: Tools, lane: Lane, cand: Candidate, options: TuneOptions) -> None:
    """A lane whose node was preempted and relaunched under its benchmark (more loads than when it joined): the
    relaunch's start is billed to it, and the lane follows the deployment as it now is."""
    try:
        relaunches_s, now = await relaunched_start_s(tools, lane.deployment, cand, options)
    except ToolCallFailed:
        return
    if relaunches_s:
        lane.start_s += relaunches_s
        lane.deployment = now


async def _state(tools: Tools, deployment_id: str) -> str:
    try:
        return (await tools.get_deployment(deployment_id)).state
    except ToolCallFailed as exc:
        return f"unreadable ({exc})"


async def _outcome(
    runtime: Runtime[Context],
    cand: Candidate,
    action: Action,
    lanes: list[Lane],
    n: int,
    decided: str,
    cap_s: float,
    events: list[str],
) -> dict[str, Any]:
    """verify's update: the pooled measurement billed at every lane's GPU seconds, timed by the slowest lane."""
    node_s = sum(lane.start_s + lane.busy_s() for lane in lanes)
    wall_s = max(lane.start_s + lane.busy_s() for lane in lanes)
    first = lanes[0]
    if decided == "over" or node_s >= cap_s:
        for lane in lanes:
            await teardown(runtime, lane.deployment.id)
        why = "stopped: this action reached its share of the budget"
        return failed_update(action, cand, why, bill(cand, min(node_s, cap_s)), removed=True)
    records = [r for lane in lanes for r in lane.records.values()]
    failure = next((f for r in records if (f := every_request_failed("full", r))), None)
    kept = [lane for lane in lanes if lane.records]
    if not kept or (failure and all(every_request_failed("full", r) for r in records)):
        why = failure or "; ".join(lane.dropped for lane in lanes if lane.dropped) or "no lane measured"
        return failed_update(action, cand, why, bill(cand, node_s), removed=bool(first.dropped))
    latencies = [x for lane in lanes for x in lane.latencies(cand)]
    parts = [measurement_of(cand, "full", b, r) for lane in kept for b, r in lane.records.items()]
    # a dropped lane's unanswered requests were run again: only the surviving lanes' failures count
    failed = sum(
        p.failed_requests
        for lane in kept
        if not lane.dropped
        for p in (measurement_of(cand, "full", b, r) for b, r in lane.records.items())
    )
    if decided:  # the requests in flight when the decided run tore its lanes down failed by our hand
        failed = 0
    usd, gpu_hours = bill(cand, node_s)
    measurement = parts[0].model_copy(
        update={
            "latencies_s": latencies,
            "requested": len(latencies) if decided else max(n, len(latencies)),
            "failed_requests": failed,
            "contaminated": sum(p.contaminated for p in parts),
            "usd": usd,
            "gpu_hours": gpu_hours,
            "lanes": len(kept),
            "decided": decided,
            "benchmark_ids": [b for lane in kept for b in lane.records],
        }
    )
    emit(
        runtime,
        Measured(
            key=cand.key,
            kind="full",
            usd=round(usd, 3),
            model_s=round(node_s, 1),
            wall_s=round(wall_s, 1),
            lanes=len(kept),
            **measured_figures(measurement),
        ),
    )
    live = not decided and not first.dropped
    summary = f"{measured_figures(measurement)} over {len(kept)} lane(s) (${usd:.2f}, {node_s:.0f} model-s)"
    return {
        "results": [Outcome(measurement=measurement, deployment_id=first.deployment.id, model_s=node_s, wall_s=wall_s)],
        "deployments": {cand.key: first.deployment.id if live else ""},  # '' : torn down
        "events": [f"full {cand.key}: {summary}" + (f"; {decided}" if decided else ""), *events],
    }
