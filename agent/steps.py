"""What the tuning graph's nodes share: progress events, and the MCP calls and readings that a verification is
made of (list the offers, deploy with the rehearsal profile, tear down, find a live deployment or a finished
benchmark to reuse, turn a benchmark record into a measurement, bill it). The tools answer JSON; it becomes words
(Offer, Deployment, Measurement, Outcome) here."""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from langgraph.config import get_stream_writer
from langgraph.runtime import Runtime
from pydantic import BaseModel, Field

from worldtune.agent.configuration import Context, TuneOptions
from worldtune.agent.events import Replanning, RunEvent, TornDown, tell
from worldtune.agent.state import Outcome, VerifyTask
from worldtune.agent.tools import Tools
from worldtune.agent.tools_client import ToolCallFailed
from worldtune.policies.search import Action, Candidate, Measurement
from worldtune.tools.mcp.results import ResultRecord
from worldtune.tools.words.deploy_request import DeployRequest
from worldtune.tools.words.deployment import Deployment, stable_seed
from worldtune.tools.words.infra import Infra
from worldtune.tools.words.offer import Offer
from worldtune.tools.words.sample import Sample

W = TypeVar("W", bound=BaseModel)


@dataclass(frozen=True)
class Verification:
    """One verify branch as its steps share it (agent/verify.py, agent/claim_run.py): the task Send gave it, the
    graph's runtime, and the action's share of the budget in GPU seconds of its offer; the rest is read from them."""

    task: VerifyTask
    runtime: Runtime[Context]
    cap_s: float

    @property
    def cand(self) -> Candidate:
        return self.task["candidate"]

    @property
    def action(self) -> Action:
        return self.task["action"]

    @property
    def options(self) -> TuneOptions:
        return self.task["options"]

    @property
    def tools(self) -> Tools:
        tools: Tools = self.runtime.context.tools
        return tools


def emit(runtime: Runtime[Context], event: RunEvent) -> None:
    """What the run says, for people: to the stream (stream_mode 'custom') and the run's sink (the CLI's printer)."""
    with contextlib.suppress(RuntimeError):  # outside a streaming run there is no writer
        get_stream_writer()({"event": event.event, **event.fields()})
    tell(runtime.context.progress, event)


def word(model: type[W], raw: dict[str, Any]) -> W:
    """What a tool answered (JSON) as the word `model`: keys it does not name (a newer server's, a tool's notes)
    are dropped."""
    return model.model_validate({k: v for k, v in raw.items() if k in model.model_fields})


async def listed_offers(tools: Tools, infra: str) -> list[Offer]:
    """Every offer the tools list (MCP list_offers), as the word (the listing's own fields, e.g. its id, dropped),
    whose capacity the run's infra can deploy (Infra.capacities: no spot or SkyServe on Slurm, no serverless on
    Kubernetes), so the search never picks a candidate the deploy tool would refuse."""
    listed = await tools.list_offers()
    can = Infra.parse(infra).capacities
    offers = [word(Offer, o.model_dump()) for o in listed.offers]
    return [o for o in offers if o.capacity in can]


def noise_seed(options: TuneOptions, role: str, key: str, iteration: int) -> int | None:
    """The deploy tool's noise_seed argument of a twin deployment (issue 39): a seed of its own per node the run
    starts (its role in the action, the candidate, the iteration), so lanes draw independent noise, as separate
    nodes do; and the same seeds in every run that makes the same decisions, so a rehearsal repeats. None for
    real engines."""
    return stable_seed(role, key, iteration) if options.twin else None


async def deploy_within(runtime: Runtime[Context], request: DeployRequest, timeout: float | None) -> Deployment:
    """Deploy `request` (the rehearsal's profile files go with it: the deploy tool serves the first one for the GPU
    type, else the shipped one; the agent never opens them), waiting at most `timeout` seconds."""
    tools: Tools = runtime.context.tools
    return await asyncio.wait_for(tools.deploy(request), timeout)


def deploy_request(cand: Candidate, options: TuneOptions, task: Any, hours: float, role: str) -> DeployRequest:
    """The deployment of `cand` that the run's action starts: on the run's infra and engine, owned by the run, its
    twin seeded by its `role` in the action (every node draws noise of its own, issue 39)."""
    return DeployRequest(
        gpu=cand.gpu,
        plan=str(cand.plan),
        infra=options.infra,
        engine=options.engine,
        capacity=cand.capacity,
        model=task["goal"].workload.model,
        twin_profiles=options.twin_profiles(),
        time_scale=options.time_scale if options.twin else 1.0,
        hours=hours,
        run_id=task["run_id"],
        noise_seed=noise_seed(options, role, cand.key, task["iteration"]),
        guardrails=task["goal"].workload.guardrails,  # the server runs the guardrails the goal's workload asks
    )


async def teardown(runtime: Runtime[Context], deployment_id: str) -> None:
    try:
        await runtime.context.tools.teardown(deployment_id)
        emit(runtime, TornDown(deployment=deployment_id))
    except ToolCallFailed as exc:  # already gone or unknown: nothing left to stop
        emit(runtime, TornDown(deployment=deployment_id, note=str(exc)))


async def live_deployment(
    tools: Tools, known: str | None, cand: Candidate, run_id: str, spare: Iterable[str] = ()
) -> Deployment | None:
    """A ready deployment of this candidate: the one the state names, or one a crashed attempt left running
    (not one of the run's `spare` nodes: those wait for the claim's run)."""
    ids = [known] if known else []
    listed = await tools.list_deployments(run_id=run_id, alive_only=True)
    ids += [d.id for d in listed if _of(d, cand) and d.id not in set(spare)]
    for deployment_id in ids:
        try:
            current = await tools.get_deployment(deployment_id)
        except ToolCallFailed:
            continue
        if current.state == "ready" and current.plan == cand.plan:  # a held node of another plan:
            return current  # not this candidate's until replanned
    return None


def _of(d: Deployment, cand: Candidate) -> bool:
    """A deployment of the candidate's GPU type, plan and capacity."""
    return d.gpu == cand.gpu and d.plan == cand.plan and d.capacity == cand.capacity


async def finished_benchmark(
    tools: Tools, run_id: str, cand: Candidate, kind: str, used: list[str]
) -> tuple[str, str] | None:
    """(benchmark, deployment) of a completed benchmark of this kind on any deployment of this candidate in the
    run that the run has not used yet (one a crashed or stopped attempt finished): reused, never repeated."""
    # A deployment's plan is its current one: a benchmark it ran before a replan measured another plan.
    mine = {d.id: d.replanned_at or 0.0 for d in await tools.list_deployments(run_id=run_id) if _of(d, cand)}
    listed = await tools.list_results(run_id=run_id, limit=1000)
    for row in reversed(listed.results):  # oldest first
        if row.deployment_id not in mine or row.status != "completed":
            continue
        if row.started_at < mine[row.deployment_id] or row.benchmark_id in used:
            continue
        record = await tools.get_result(row.benchmark_id)
        if (kind == "probe") == bool(spec_of(record).probe_steps):
            return row.benchmark_id, row.deployment_id
    return None


def measurement_of(cand: Candidate, kind: str, bench_id: str, record: ResultRecord) -> Measurement:
    result = record.benchmark.result
    if kind == "probe":
        fit = result.fit if result is not None else None
        # the server's own time when it reports one, as the full run's samples
        probed = [
            (s.steps, float(s.server_time() or 0.0))
            for s in samples_of(record)
            if s.phase == "probe" and s.ok and not s.interrupted
        ]
        return Measurement(
            key=cand.key,
            kind="probe",
            per_step_s=fit.per_step_s if fit is not None else None,
            fixed_s=fit.fixed_s if fit is not None else None,
            benchmark_id=bench_id,
            repeats=max(1, spec_of(record).repeats),
            probe_points=probed,
        )
    # An attempt cut short by a preemption goes on on the relaunched node (Backend.benchmark): what it answered
    # before the cut stays in the database, marked interrupted, and is evidence (each an answered request, asked
    # once: the attempt after it asks only for the rest, BenchmarkSpec.remainder); its cut requests are not failures
    samples = [s for s in samples_of(record) if s.phase == "full" and s.counts()]
    # The client's end-to-end time, what goals are judged on (on the twin, its model clock: see client_time).
    latencies = [float(s.client_time() or 0.0) for s in samples if s.ok]
    spec = spec_of(record)
    # the benchmark sends `repeats` full requests per client at every concurrency level
    requested = sum(c * spec.repeats for c in spec.concurrency)
    return Measurement(
        key=cand.key,
        kind="full",
        latencies_s=latencies,
        benchmark_id=bench_id,
        requested=max(requested, len(samples)),
        failed_requests=sum(1 for s in samples if not s.ok),
        contaminated=sum(1 for s in samples if waited_behind_others(s)),
    )


class StoredSpec(BaseModel):
    """What of a benchmark's stored configuration (its BenchmarkSpec as stored) a measurement is read with."""

    repeats: int = 0
    concurrency: list[int] = Field(default_factory=list)
    probe_steps: list[int] = Field(default_factory=list)


def spec_of(record: ResultRecord) -> StoredSpec:
    """How a get_result record measured: its requests per client and level, its levels and its probes."""
    return word(StoredSpec, record.config)


def samples_of(record: ResultRecord) -> list[Sample]:
    """The samples of a get_result record (as stored: the fields measured), as Samples."""
    return [Sample.of(s) for s in record.samples or []]


def pipeline_work_s(stages: Mapping[str, Any]) -> float | None:
    """The pipeline's own time for one request (s), from the stage durations vLLM-Omni 0.30 reports: a whole-pipeline
    `<Pipeline>.forward` where one is sent, else the sum of its stages (`<Pipeline>.diffuse`, `.vae.decode`,
    `.vae.encode`, `.text_encoder.forward`: Cosmos3's server sends `diffuse` and `vae.decode`, Wan's adds the text
    encoder). The engine's clocks (`queue_wait_ms`, `stage_N_gen_ms`, milliseconds, no dot) are not stages."""
    seconds = {str(k): float(v) for k, v in stages.items() if "." in str(k) and _number(v)}
    whole = [v for k, v in seconds.items() if k.count(".") == 1 and k.endswith(".forward")]
    if whole:
        return max(whole)
    return sum(seconds.values()) or None


def server_wait_s(stored: Sample | dict[str, Any]) -> float | None:
    """How long the server held a request beyond its pipeline's own work (s): the diffusion stage's clock from submit
    to output (`stage_0_gen_ms`, where sent: its scheduler queue included, the API server's MP4 encode not) less the
    pipeline's stages, else the server's inference time (X-Inference-Time-S) less them. None without stage times."""
    sample = Sample.of(stored)
    work = pipeline_work_s(sample.stage_durations)
    if work is None:
        return None
    stages = sample.stage_durations
    gen = [float(v) for k, v in stages.items() if re.fullmatch(r"stage_\d+_gen_ms", str(k)) and _number(v)]
    held = max(gen) / 1000.0 if gen else sample.server_time_s
    return None if held is None else float(held) - work


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def waited_behind_others(stored: Sample | dict[str, Any]) -> bool:
    """An answer sent with nothing of ours ahead on its endpoint that the server held beyond its own pipeline work
    (server_wait_s) by more than half that work: it queued at the server behind load that was not this benchmark's.
    The client's latency is not used: on a busy machine, or through a twin's time scale, the client's own overhead
    would read as queueing."""
    sample = Sample.of(stored)
    if not sample.ok or (sample.queue_ahead or 0) > 0:
        return False
    work, wait = pipeline_work_s(sample.stage_durations), server_wait_s(sample)
    return work is not None and wait is not None and work > 0 and wait > 0.5 * work


async def engine_check(tools: Tools, deployment_id: str) -> str:
    """After a run with failed or missing answers: what the deployment says about itself ('' if it looks ready)."""
    try:
        current = await tools.get_deployment(deployment_id)
    except ToolCallFailed as exc:
        return f"deployment {deployment_id} unreadable: {exc}"
    return "" if current.state == "ready" else f"deployment {deployment_id} is {current.state}"


def every_request_failed(kind: str, record: ResultRecord) -> str | None:
    """Why no request of the measured phase succeeded (an OOM, a dead engine, a refusal), or None if one did."""
    phase = "probe" if kind == "probe" else "full"
    samples = [s for s in samples_of(record) if s.phase == phase]
    if not samples or any(s.ok for s in samples):
        return None
    first = samples[0]
    detail = (first.detail or "")[:300]
    return f"every {phase} request failed ({len(samples)}): {first.error_kind}: {detail}"


def busy_model_s(record: ResultRecord) -> float:
    """Model seconds the node was busy: per replica, the sum of its requests' client times (each client sends its
    next request when the last answer is in); the slowest replica; summed over the benchmark's attempts (a node
    preempted mid-run was busy until then, its relaunch again for the attempt run there)."""
    busy: dict[tuple[int | None, str], float] = {}
    for s in samples_of(record):
        t = s.client_time()
        busy[s.attempt, s.endpoint] = busy.get((s.attempt, s.endpoint), 0.0) + float(t or 0.0)
    slowest: dict[int | None, float] = {}
    for (attempt, _), seconds in busy.items():
        slowest[attempt] = max(slowest.get(attempt, 0.0), seconds)
    return sum(slowest.values())


def measured_figures(m: Measurement) -> dict[str, Any]:
    if m.kind == "probe":
        return {"per_step_s": round(m.per_step_s or 0.0, 3), "fixed_s": round(m.fixed_s or 0.0, 2)}
    if not m.latencies_s:
        return {"latencies": 0}
    return {"p50_s": round(sorted(m.latencies_s)[len(m.latencies_s) // 2], 1), "n": len(m.latencies_s)}


def bill(cand: Candidate, seconds: float) -> tuple[float, float]:
    return cand.offer.usd_per_hour * seconds / 3600, cand.offer.gpu_count * seconds / 3600


def failed_update(
    action: Action, cand: Candidate, error: str, spent: tuple[float, float], removed: bool = False
) -> dict[str, Any]:
    """verify's update for a failed action: its spend, why, and whether its deployment was torn down."""
    m = Measurement(key=cand.key, kind=action.kind, usd=spent[0], gpu_hours=spent[1])
    return {
        "results": [Outcome(measurement=m, failed=True, error=error, removed=removed)],
        "events": [f"{action.kind} {cand.key} failed: {error}"],
    }


def start_s(deployment: Deployment, cand: Candidate, options: TuneOptions) -> float:
    """GPU seconds a deployment's start costs: provisioning (modelled on the local twin) and the model load.

    A replanned deployment (same node, new plan) pays only its warm load, from the restart on."""
    scale = options.time_scale if options.twin else 1.0
    replanned = deployment.replanned_at
    began = replanned or deployment.created_at
    load_s = ((deployment.ready_at or time.time()) - began) * scale
    if options.twin and deployment.modelled_load_s is not None:
        load_s = deployment.modelled_load_s  # what the twin modelled; a process start magnified is not GPU time
    elif options.twin:  # an older twin that did not say: cap the magnified wall time
        load_s = min(load_s, 2 * (cand.load_s if replanned else cand.cold_load_s or cand.load_s))
    return float(_provision_s(options, cand, replanned=bool(replanned)) + load_s)


async def relaunched_start_s(
    tools: Tools, before: Deployment, cand: Candidate, options: TuneOptions
) -> tuple[float, Deployment]:
    """GPU seconds of the relaunches a backend made of `before`'s node under a benchmark (a preempted spot node
    started again: more loads now than before), and the deployment as it now is."""
    now = await tools.get_deployment(before.id)
    return start_s(now, cand, options) * max(0, now.loads - before.loads), now


def cannot_measure(state: str, benchmark_running: bool) -> bool:
    """A deployment in `state` can no longer answer its benchmark: neither ready nor loading, unless it is a
    preempted node under a benchmark still running (Backend.benchmark relaunches it and runs the attempt again,
    or ends the benchmark failed)."""
    return state not in ("ready", "loading") and not (state == "preempted" and benchmark_running)


def modelled_start_s(cand: Candidate, options: TuneOptions) -> float:
    """The twin's GPU seconds for a new node's start that failed: start_s's terms as modelled (provisioning and the
    cold load), not the wall time it took: at time scale K a loaded machine's slow process start costs K x."""
    return _provision_s(options, cand, replanned=False) + (cand.cold_load_s or cand.load_s)


def _provision_s(options: TuneOptions, cand: Candidate, replanned: bool) -> float:
    """Provisioning, modelled on the local twin (on SkyPilot it is in the wall time); none for a replanned node."""
    return cand.offer.provision_s if options.infra == "local" and not replanned else 0.0


def lease_hours(action: Action, options: TuneOptions, cap_s: float) -> float:
    """The hours a deployment (or a replanned node) is asked for: this action's modelled seconds with half again
    as margin, at least --hold-hours, at most its share of the budget: on SkyPilot they are the cluster's hard
    autodown, so fewer would cut a long full run short. The twin's lease is wall time (tools/runs/lease.py): the
    modelled seconds are divided by its time scale."""
    scale = options.time_scale if options.twin else 1.0
    hours = max(options.hold_hours, 1.5 * action.expected_s / scale / 3600.0)
    if math.isfinite(cap_s):
        hours = min(hours, max(options.hold_hours, cap_s / scale / 3600.0))
    return round(hours, 4)


async def replan(runtime: Runtime[Context], deployment_id: str, cand: Candidate, hours: float) -> Deployment | None:
    """The node of a live deployment on this candidate's offer, restarted under its plan (MCP replan_deployment);
    None when it is not ready or the replan failed (its node is then torn down) and a fresh deployment is due."""
    tools: Tools = runtime.context.tools
    try:
        current = await tools.get_deployment(deployment_id)
    except ToolCallFailed:
        return None
    if current.state != "ready" or current.gpu != cand.gpu:
        return None
    emit(runtime, Replanning(key=cand.key, deployment=deployment_id, plan=str(cand.plan), previous=str(current.plan)))
    try:
        outcome = await tools.replan(deployment_id, cand.plan, hours)
    except ToolCallFailed as exc:
        emit(runtime, Replanning(key=cand.key, deployment=deployment_id, note=str(exc)))
        return None
    return outcome.deployment
