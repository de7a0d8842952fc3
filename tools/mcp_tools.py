"""The MCP tools: thin, typed wrappers over worldtune's plain functions, registered on the server.

Every tool's parameters are flat and named as on the command line; its return type is a pydantic
model (clients get an outputSchema and structured content); a bad argument becomes a readable tool
error with nothing spent. Tools that rent GPUs or stop things need `confirm=true`; without it they
answer with what they would do and what it would cost. tools/mcp_server.py imports this module only
when a client calls a tool (or lists tools with no cached listing), so start-up stays fast.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from worldtune.tools.benchmark import BenchmarkStatus
from worldtune.tools.deployment import Deployment
from worldtune.tools.errors import InvalidInput, WorldtuneError
from worldtune.tools.estimate import Estimate, PlanCheck
from worldtune.tools.offer import Offer
from worldtune.tools.spend import SpendQuote
from worldtune.tools.workload import SUPPORTED_FPS, SUPPORTED_SIZES

if TYPE_CHECKING:
    from worldtune.tools.mcp_server import Session
    from worldtune.tools.tuning import Tuner

T = TypeVar("T")

# ---- annotations: what each kind of tool does to the world --------------------------------------
READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
# Reads, but asks the infra (a cloud, a cluster, local processes) for the current state.
READ_ONLY_LIVE = ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=True
)
# Starts things (processes, GPUs); repeating it starts another one.
STARTS = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=True)
# Rents cloud GPUs (open world) and is not idempotent.
RENTS = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=True)
# Stops and deletes what a deployment runs; repeating it changes nothing more.
DESTROYS = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=True)
# approve_tuning: approve=true spends, approve=false stops the run for good (not undoable, not repeatable)
DECIDES = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=True)

# ---- flat parameters, named and described as on the command line ---------------------------------
ModelArg = Annotated[
    str, Field(description="Cosmos 3 model: cosmos3-super | cosmos3-nano | cosmos3-edge | cosmos3-super-i2v-4step")
]
GpuArg = Annotated[str, Field(description="GPU type: H200 or B200 (calibrated); H100/B300 need a profile")]
PlanArg = Annotated[
    str,
    Field(
        description="parallel plan: tokens joined by '-': tp8, u4 (Ulysses), r2 (ring), cfg2, hsdp8, vae2, fp8, "
        "or 1gpu; an 'Nx' prefix gives replicas per node (8x1gpu, 2xtp4). Example: cfg2-u4-hsdp8"
    ),
]
StepsArg = Annotated[int | None, Field(ge=1, le=200, description="denoising steps (anchor workload: 35)")]
CapacityArg = Annotated[
    Literal["on-demand", "spot", "serverless"], Field(description="price offers at on-demand | spot | serverless")
]
ProfileArg = Annotated[
    str | None, Field(description="path of a profile YAML to predict with instead of the calibrated one")
]
InfraArg = Annotated[
    str, Field(description="where to run: local (this machine), slurm/NAME, kubernetes, or a cloud (nebius, aws, ...)")
]
ConfirmArg = Annotated[
    bool,
    Field(
        strict=True,  # JSON true only: "yes", "on" or 1 are not a person's consent to spend
        description="must be true to actually start/stop; false answers with what would happen and cost",
    ),
]
HoursArg = Annotated[
    float,
    Field(
        ge=0, le=720, allow_inf_nan=False,
        description="hours to keep it up once ready: the commitment counted against the guardrails, and on "
        "SkyPilot the hard autodown",
    ),
]  # fmt: skip
UsdPerHourArg = Annotated[
    float | None,
    Field(ge=0, le=100000, allow_inf_nan=False,
          description="your own cluster's price per node-hour (slurm/NAME, kubernetes); clouds use their offer"),
]  # fmt: skip
# The workload of a benchmark's requests, one argument per Workload field (unset: the model's anchor value).
# Limits are Workload's own (checked when it is built), so they are stated here, not enforced twice.
SizeArg = Annotated[
    str | None, Field(description=f"WIDTHxHEIGHT, one of {', '.join(f'{w}x{h}' for w, h in SUPPORTED_SIZES)}")
]
WidthArg = Annotated[int | None, Field(description="frame width in pixels (with height; or give size)")]
HeightArg = Annotated[int | None, Field(description="frame height in pixels (with width; or give size)")]
FramesArg = Annotated[int | None, Field(description="num_frames of each clip, 5 to 300 (Cosmos3-Super anchor: 189)")]
FpsArg = Annotated[int | None, Field(description=f"frames per second, one of {list(SUPPORTED_FPS)}")]
GuidanceArg = Annotated[
    float | None, Field(description="guidance_scale, 0 to 20; above 1 runs two CFG branches (distilled: 1.0 only)")
]
FlowShiftArg = Annotated[float | None, Field(description="flow_shift of the scheduler, above 0 and at most 100")]
SeedArg = Annotated[int | None, Field(description="seed of every request, a signed 64-bit integer")]
GuardrailsArg = Annotated[bool | None, Field(description="run the guardrails per request (anchor: false)")]
PromptArg = Annotated[str | None, Field(description="prompt of every request (anchor: a warehouse robot scene)")]
NegativePromptArg = Annotated[str | None, Field(description="negative prompt of every request")]
MaxSequenceLengthArg = Annotated[int | None, Field(description="text tokens the encoder pads to, 1 to 4096")]
TaskArg = Annotated[
    Literal["t2v", "i2v"] | None, Field(description="t2v or i2v (default: the model's first; i2v-4step is i2v)")
]


# ---- tool outputs ---------------------------------------------------------------------------------
class OfferEntry(Offer):
    """An offer with its id (infra/region/GPU:count/capacity)."""

    offer_id: str


class OfferList(BaseModel):
    """Offers matching the filters, cheapest per hour first."""

    count: int
    offers: list[OfferEntry]


class PlanList(BaseModel):
    """The valid plans for a GPU count (sorted), the Pareto frontier, and which meet the given constraints."""

    model: str
    gpu: str
    gpus: int
    goal: str = Field(description="the constraints applied, in words ('' for none)")
    valid_count: int
    refused_count: int
    meeting_goal_count: int
    frontier: list[str] = Field(description="plans on the latency / $ per clip / throughput Pareto frontier")
    best: str | None = Field(description="the cheapest plan per clip that meets the constraints")
    plans: list[Estimate] = Field(description="plans shown (frontier only if asked), sorted by `sort`, up to limit")
    refused_examples: dict[str, str] = Field(description="one refused plan per rule, with its reason")


class DeployOutcome(BaseModel):
    """What a provision/deploy call did, or (without confirm) what it would do and cost."""

    done: bool = Field(description="true when something was started")
    needs_confirmation: bool = Field(description="true when nothing was started because confirm was not true")
    message: str
    quote: SpendQuote
    deployment: Deployment | None = None


class TeardownOutcome(BaseModel):
    """What a teardown did, or (without confirm) what it would stop."""

    done: bool
    needs_confirmation: bool
    message: str
    billed_usd: float = Field(description="price per hour x hours it has been up")
    deployment: Deployment


class DeploymentList(BaseModel):
    """Deployments in the results database, oldest first."""

    count: int
    deployments: list[Deployment]


class ResultSummary(BaseModel):
    """One benchmark in a listing: the headline figures."""

    benchmark_id: str
    status: str
    deployment_id: str | None = None
    run_id: str | None = None
    started_at: float
    steps: int | None = None
    completed_requests: int | None = None
    latency_mean: float | None = None
    latency_p95: float | None = None
    clips_per_hour: float | None = None
    per_step_s: float | None = None


class ResultList(BaseModel):
    """Benchmarks in the database, newest first."""

    count: int
    results: list[ResultSummary]


class ResultRecord(BaseModel):
    """One benchmark's full record, optionally with every sample."""

    benchmark: BenchmarkStatus
    config: dict[str, Any] = Field(description="what was measured and how (the BenchmarkSpec as stored)")
    samples: list[dict[str, Any]] | None = Field(default=None, description="every request measured (if asked)")
    sample_count: int


class ComparedKey(BaseModel):
    """One figure across the compared results, with the change relative to the first."""

    key: str
    values: list[float | None]
    change_vs_first: list[float | None] = Field(description="(value - first) / first; null when not computable")


class Comparison(BaseModel):
    """Side-by-side figures of several benchmark results."""

    benchmark_ids: list[str]
    figures: list[ComparedKey]


class SpendEstimate(BaseModel):
    """What a tuning run expects to spend before it starts (shown at the approval question)."""

    model_config = ConfigDict(extra="allow")  # an older run's record may carry keys this version does not name

    usd: float = Field(description="expected spend of the search, USD")
    gpu_hours: float = Field(description="expected GPU-hours (modelled GPU time on the twin)")
    budget_usd: float | None = Field(default=None, description="the hard budget of the run")
    candidates: int | None = Field(default=None, description="candidates ranked")
    feasible: int | None = Field(default=None, description="candidates predicted to meet the goal")
    first_to_verify: list[str] = Field(default_factory=list, description="the candidates it would measure first")
    engine: str | None = Field(default=None, description="twin | vllm-omni")
    infra: str | None = Field(default=None, description="where it runs")
    priced_as: str | None = Field(default=None, description="what the price is based on")


class TuningStatus(BaseModel):
    """Where a tuning run stands (the agent's record and its last checkpoint)."""

    run_id: str
    status: str = Field(description="running | completed | failed | waiting (for approval) | ...")
    waiting_for_approval: bool = Field(default=False, description="answer with approve_tuning")
    spend_estimate: SpendEstimate | None = Field(
        default=None, description="what the run expects to spend, shown before approval"
    )
    spent_usd: float = 0.0
    measurements: int = 0
    stop_reason: str | None = None
    events: list[str] = Field(default_factory=list, description="the last events of the run, one line each")
    summary: dict[str, Any] | None = Field(default=None, description="the recommendation and evidence, once done")
    error: str | None = None
    note: str | None = None


COMPARED_KEYS = (
    "latency_mean",
    "latency_median",
    "latency_p90",
    "latency_p95",
    "latency_p99",
    "throughput_qps",
    "clips_per_hour",
    "per_step_s",
    "fixed_s",
    "completed_requests",
    "failed_requests",
    "video_seconds_per_wall_second",
)


# ---- plumbing -------------------------------------------------------------------------------------
@contextlib.contextmanager
def refusals() -> Iterator[None]:
    """Turn worldtune's refusals and validation errors into tool errors the client reads."""
    try:
        yield
    except ToolError:
        raise
    except (WorldtuneError, ValidationError, ValueError, KeyError, FileNotFoundError) as exc:
        raise ToolError(str(exc)) from exc
    except OSError as exc:  # e.g. a name too long: the SDK would answer a bare "Error executing tool"
        name = exc.filename if isinstance(exc.filename, str) else ""
        raise ToolError(f"file={name[:200]!r} is not valid: a file worldtune can use ({exc.strerror})") from exc


async def in_thread_with_progress(ctx: Context, work: Callable[[Callable[[str, float | None], None]], T]) -> T:
    """Run blocking `work(progress)` on a worker thread; its progress(message, fraction) calls reach the client."""
    last = [0.0]

    def progress(message: str, fraction: float | None) -> None:
        if fraction is not None:
            last[0] = max(last[0], min(1.0, float(fraction)))
        with contextlib.suppress(Exception):  # a client that went away must not stop the work
            anyio.from_thread.run(ctx.report_progress, last[0], 1.0, message)

    return await anyio.to_thread.run_sync(lambda: work(progress))


async def while_caller_waits(caller_gone: threading.Event, work: Callable[[], Awaitable[T]]) -> T:
    """Await `work()`; the moment this call is cancelled (client timeout, cancel, disconnect) set `caller_gone`.

    The worker thread cannot be interrupted and anyio waits for it, so the event is how it learns that
    nobody will receive what it is starting.
    """
    finished = threading.Event()

    async def watch() -> None:
        try:
            await anyio.sleep_forever()
        finally:
            if not finished.is_set():
                caller_gone.set()

    error: BaseException | None = None
    async with anyio.create_task_group() as group:
        group.start_soon(watch)
        try:
            result = await work()
        except BaseException as exc:  # raised below, outside the group, so it is not wrapped in a group error
            error = exc
        finally:
            finished.set()
            group.cancel_scope.cancel()
    if caller_gone.is_set() and not isinstance(error, anyio.get_cancelled_exc_class()):
        await anyio.lowlevel.checkpoint()  # the call was cancelled: end as cancelled, whatever the worker raised
    if error is not None:
        raise error
    return result


def size_fields(size: str | None, width: int | None, height: int | None) -> dict[str, int]:
    """`size` ("WIDTHxHEIGHT") as width and height; refused when it is malformed or contradicts width/height."""
    if size is None:
        return {}
    w, sep, h = size.lower().partition("x")
    if not sep or not w.strip().isdigit() or not h.strip().isdigit():
        raise InvalidInput("size", size, "WIDTHxHEIGHT, e.g. 832x480", "480p is 832x480, 720p is 1280x720")
    found = {"width": int(w), "height": int(h)}
    for key, given in (("width", width), ("height", height)):
        if given is not None and given != found[key]:
            raise InvalidInput(key, given, f"{found[key]} as size={size!r} says, or leave it out")
    return found


def validation_message(exc: ValidationError) -> str:
    """A pydantic refusal as worldtune words it: field=value is not valid: why (one clause per error)."""
    parts = []
    for err in exc.errors():
        cause = (err.get("ctx") or {}).get("error")
        if isinstance(cause, WorldtuneError):
            parts.append(str(cause))
        else:
            field = ".".join(str(x) for x in err["loc"]) or "workload"
            parts.append(f"{field}={err['input']!r} is not valid: {err['msg']}")
    return "; ".join(parts)


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def summary_from_row(row: dict[str, Any]) -> ResultSummary:
    result = row.get("result") or {}
    return ResultSummary(
        benchmark_id=row["id"],
        status=row["status"],
        deployment_id=row.get("deployment_id"),
        run_id=row.get("run_id"),
        started_at=row["started_at"],
        steps=result.get("steps"),
        completed_requests=result.get("completed_requests"),
        latency_mean=_finite(result.get("latency_mean")),
        latency_p95=_finite(result.get("latency_p95")),
        clips_per_hour=_finite(result.get("clips_per_hour")),
        per_step_s=_finite(result.get("per_step_s")),
    )


def usd_per_clip(result: dict[str, Any], deployment: Deployment | None) -> float | None:
    """The node's price per hour / measured clips per hour. A twin is priced at the offer it stands in for."""
    clips = _finite(result.get("clips_per_hour"))
    if deployment is None or not clips:
        return None
    price = deployment.offer.usd_per_hour if deployment.offer else deployment.usd_per_hour
    return price / clips if price else None


def compare(rows: list[dict[str, Any]], deployments: dict[str, Deployment] | None = None) -> Comparison:
    """Figures of several stored results side by side, relative to the first (with $/clip when priced)."""
    results = [row.get("result") or {} for row in rows]
    found = deployments or {}
    columns: dict[str, list[float | None]] = {key: [_finite(r.get(key)) for r in results] for key in COMPARED_KEYS}
    columns["usd_per_clip"] = [
        usd_per_clip(r, found.get(row.get("deployment_id") or "")) for r, row in zip(results, rows, strict=True)
    ]
    figures = []
    for key, values in columns.items():
        first = values[0]
        changes = [(v - first) / first if v is not None and first is not None and first != 0 else None for v in values]
        figures.append(ComparedKey(key=key, values=values, change_vs_first=changes))
    return Comparison(benchmark_ids=[r["id"] for r in rows], figures=figures)


# ---- the tools ------------------------------------------------------------------------------------
def register_tools(mcp: MCPServer, session: Session) -> None:
    """Add every worldtune tool to `mcp`; they share `session` (the results database)."""

    def allowed_profile(path: str | None, field: str = "profile") -> str | None:
        """The profile file `path` names, if this session's client may have it read (tools/profile_paths.py)."""
        from worldtune.tools.profile_paths import allowed_profile_path

        return str(allowed_profile_path(path, session.origin, field)) if path else None

    # ---------- offers, plans, estimates (free, offline) ----------
    @mcp.tool(title="List GPU offers", annotations=READ_ONLY)
    def list_offers(
        gpu: Annotated[str | None, Field(description="GPU type, e.g. H200 or B200; all when omitted")] = None,
        gpus: Annotated[int | None, Field(ge=1, le=8, description="exact GPUs per node; any when omitted")] = None,
        infra: Annotated[str | None, Field(description="only this infra, e.g. nebius, aws, lambda")] = None,
        capacity: Annotated[CapacityArg | None, Field(description="only this capacity")] = None,
        source: Annotated[
            Literal["auto", "catalog", "snapshot"],
            Field(description="SkyPilot catalog files, the shipped snapshot, or the catalog when present"),
        ] = "auto",
    ) -> OfferList:
        """List GPU nodes you can rent (infra, region, GPU x count, capacity, price per hour), cheapest first.

        Prices come from SkyPilot's catalog files when present, else a dated offline snapshot.
        """
        from worldtune.tools.offers import list_offers as find_offers

        with refusals():
            found = find_offers(
                gpu=gpu, gpus=gpus, infra=[infra] if infra else None, capacity=[capacity] if capacity else None,
                source=source,
            )  # fmt: skip
        return OfferList(count=len(found), offers=[OfferEntry(**o.model_dump(), offer_id=o.id) for o in found])

    @mcp.tool(title="Validate a parallelism plan", annotations=READ_ONLY)
    def validate_plan(
        plan: PlanArg,
        model: ModelArg = "cosmos3-super",
        gpu: GpuArg = "H200",
        gpus: Annotated[int | None, Field(ge=1, le=8, description="GPUs of the node (default: a full node)")] = None,
        steps: StepsArg = None,
        profile: ProfileArg = None,
    ) -> PlanCheck:
        """Check a plan against vLLM-Omni 0.30's rules for Cosmos 3 and the GPU's memory.

        A refused plan is an answer, not an error: `valid` is false, `message` says which rule it
        breaks with the values, and `alternative` names a nearby plan that is valid.
        """
        from worldtune.tools.estimate import check_plan, resolve_profile
        from worldtune.tools.gpus import get_gpu
        from worldtune.tools.plan import Plan
        from worldtune.tools.workload import anchor_workload

        with refusals():
            spec = get_gpu(gpu)
            workload = anchor_workload(model) if steps is None else anchor_workload(model, steps=steps)
            truth = resolve_profile(spec.name, allowed_profile(profile))
            return check_plan(workload, spec.name, Plan.parse(plan), truth, gpus)

    @mcp.tool(title="Estimate one plan", annotations=READ_ONLY)
    def estimate(
        plan: PlanArg,
        model: ModelArg = "cosmos3-super",
        gpu: GpuArg = "H200",
        steps: StepsArg = None,
        capacity: CapacityArg = "on-demand",
        profile: ProfileArg = None,
    ) -> Estimate:
        """Predict one plan on the anchor workload (720p, 189 frames): latency per clip, per-step and fixed time,
        memory per GPU, clips per hour and cost per clip on the cheapest matching offer.

        A plan vLLM-Omni would refuse comes back with valid=false and the rule's reason.
        """
        from worldtune.tools.estimate import estimate as predict

        with refusals():
            return predict(
                model=model, gpu=gpu, plan=plan, steps=steps, profile_path=allowed_profile(profile), capacity=capacity
            )

    @mcp.tool(title="List plans and their Pareto frontier", annotations=READ_ONLY)
    def list_plans(
        model: ModelArg = "cosmos3-super",
        gpu: GpuArg = "H200",
        gpus: Annotated[int, Field(ge=1, le=8, description="GPUs on the node the plans must use")] = 8,
        steps: StepsArg = None,
        capacity: CapacityArg = "on-demand",
        profile: ProfileArg = None,
        latency_bound_s: Annotated[
            float | None, Field(gt=0, description="keep plans whose predicted latency per clip is at most this")
        ] = None,
        throughput_floor: Annotated[
            float | None, Field(gt=0, description="keep plans that make at least this many clips per hour per node")
        ] = None,
        frontier_only: Annotated[bool, Field(description="show only the Pareto frontier")] = False,
        sort: Annotated[Literal["latency", "cost", "throughput"], Field(description="order of `plans`")] = "cost",
        limit: Annotated[int, Field(ge=1, le=500, description="most plans returned")] = 20,
    ) -> PlanList:
        """Every plan vLLM-Omni would accept on GPUS GPUs of one node, with predictions, the Pareto frontier
        (latency vs cost per clip vs throughput) and the cheapest plan meeting an optional latency bound or
        throughput floor. Free: nothing is started.
        """
        from worldtune.policies.pareto import goal_violations, pareto_frontier
        from worldtune.tools.estimate import list_plans as all_plans
        from worldtune.tools.goal import Goal
        from worldtune.tools.gpus import get_gpu
        from worldtune.tools.workload import anchor_workload

        with refusals():
            spec = get_gpu(gpu)
            workload = anchor_workload(model) if steps is None else anchor_workload(model, steps=steps)
            goal = Goal(
                objective="min_cost_per_clip",
                workload=workload,
                latency_bound_s=latency_bound_s,
                throughput_floor_clips_per_hour=throughput_floor,
                gpus=[spec.name],
                capacities=[capacity],
            )
            found = all_plans(
                model=model, gpu=spec.name, gpus=gpus, steps=steps, profile_path=allowed_profile(profile),
                capacity=capacity, workload=workload,
            )  # fmt: skip
        valid = [e for e in found if e.valid]
        refused = [e for e in found if not e.valid]
        meeting = [e for e in valid if not goal_violations(e, goal)]
        frontier = pareto_frontier(meeting)
        keys: dict[str, Callable[[Estimate], float]] = {
            "latency": lambda e: e.latency_s or math.inf,
            "cost": lambda e: e.usd_per_clip if e.usd_per_clip is not None else math.inf,
            "throughput": lambda e: -(e.clips_per_hour_per_node or 0.0),
        }
        shown = sorted(frontier if frontier_only else meeting, key=keys[sort])[:limit]
        best = min(meeting, key=keys["cost"], default=None)
        examples: dict[str, str] = {}
        for e in refused:
            examples.setdefault(e.rule, f"{e.plan}: {e.reason}")
        constrained = latency_bound_s is not None or throughput_floor is not None
        return PlanList(
            model=workload.model,
            gpu=spec.name,
            gpus=gpus,
            goal=goal.describe() if constrained else "",
            valid_count=len(valid),
            refused_count=len(refused),
            meeting_goal_count=len(meeting),
            frontier=[e.plan for e in frontier],
            best=best.plan if best else None,
            plans=shown,
            refused_examples=examples,
        )

    # ---------- deployments (start things; paid ones need confirm) ----------
    def quote_or_refuse(action: str, **arguments: Any) -> SpendQuote:
        from worldtune.tools.deploy import quote_deploy

        with refusals():  # the capability checks the plan, the infra and the guardrails
            return quote_deploy(action=action, store=session.store, **arguments)

    def would(spend: SpendQuote, what: str) -> str:
        where = spend.offer.id if spend.offer else spend.infra
        return (
            f"would {what} {spend.plan} ({spend.gpus}x{spend.gpu}) on {where} at ${spend.usd_per_hour:.2f}/h for "
            f"about {spend.expected_hours:.2f} h (provisioning {spend.provision_s:.0f} s + model load "
            f"{spend.load_s:.0f} s + {spend.hold_hours:g} h): about ${spend.expected_usd:.2f}. "
            "Call again with confirm=true to go ahead."
        )

    @mcp.tool(title="Deploy a plan", annotations=STARTS)
    async def deploy(
        ctx: Context,
        gpu: GpuArg,
        plan: PlanArg,
        infra: InfraArg = "local",
        engine: Annotated[
            Literal["twin", "vllm-omni"],
            Field(description="twin: a modelled server with vLLM-Omni's API (no GPU); vllm-omni: the real server"),
        ] = "twin",
        capacity: CapacityArg = "on-demand",
        model: ModelArg = "cosmos3-super",
        twin_profile: Annotated[
            str | None, Field(description="twin only: profile YAML the twin runs with (the rehearsal's truth)")
        ] = None,
        time_scale: Annotated[
            float, Field(gt=0, le=100000, description="twin only: divide its sleeps by this (fast rehearsals)")
        ] = 1.0,
        hours: HoursArg = 1.0,
        run_id: Annotated[str | None, Field(description="tuning run that owns the deployment")] = None,
        confirm: ConfirmArg = False,
        usd_per_hour: UsdPerHourArg = None,
    ) -> DeployOutcome:
        """Start a plan on an infra with an engine and wait until it is ready; returns the deployment and its endpoints.

        infra=local with engine=twin runs a modelled vLLM-Omni server on this machine: free, no confirmation.
        Anything else starts real processes on (possibly rented) GPUs: without confirm=true it only answers with
        the offer, price per hour and expected hours (provisioning + model load + `hours`) and cost, and it
        respects the budget guardrails (policies/guardrails.yaml).
        """
        from worldtune.tools.spend import needs_confirmation

        spend = quote_or_refuse(
            "deploy", gpu=gpu, plan=plan, infra=infra, engine=engine, capacity=capacity, model=model, hours=hours,
            run_id=run_id, usd_per_hour=usd_per_hour,
        )  # fmt: skip
        if needs_confirmation(infra, engine) and not confirm:
            return DeployOutcome(
                done=False, needs_confirmation=True, message=would(spend, f"deploy {engine}"), quote=spend
            )
        from worldtune.tools import deploy as deploying

        caller_gone = threading.Event()  # set when this call is cancelled: the deploy is then torn down

        def work(progress: Callable[[str, float | None], None]) -> Deployment:
            with refusals():
                return deploying.deploy_for_caller(
                    caller_gone, gpu=gpu, plan=plan, infra=infra, engine=engine, capacity=capacity, model=model,
                    twin_profile=twin_profile, time_scale=time_scale, run_id=run_id, store=session.store,
                    progress=progress, hours=hours, usd_per_hour=usd_per_hour, profile_origin=session.origin,
                )  # fmt: skip

        await ctx.report_progress(0.0, 1.0, f"deploying {spend.plan} on {infra} ({engine})")
        deployment = await while_caller_waits(caller_gone, lambda: in_thread_with_progress(ctx, work))
        await ctx.report_progress(1.0, 1.0, f"{deployment.id} is {deployment.state}")
        return DeployOutcome(
            done=True,
            needs_confirmation=False,
            message=f"{deployment.id} is {deployment.state} at {', '.join(deployment.endpoints) or '-'}",
            quote=spend,
            deployment=deployment,
        )

    @mcp.tool(title="Get a deployment", annotations=READ_ONLY_LIVE)
    def get_deployment(
        deployment_id: Annotated[str, Field(description="id returned by deploy, e.g. wt-1a2b3c4d")],
    ) -> Deployment:
        """One deployment: its plan, offer, state (pending, loading, ready, failed, preempted, terminated),
        endpoints and price per hour."""
        from worldtune.tools import deploy as deploying

        session.deployment(deployment_id)  # a readable error for an unknown id
        with refusals():
            return deploying.get_deployment(deployment_id, store=session.store)

    @mcp.tool(title="List deployments", annotations=READ_ONLY)
    def list_deployments(
        run_id: Annotated[str | None, Field(description="only this tuning run's deployments")] = None,
        alive_only: Annotated[bool, Field(description="only those not terminated or failed")] = False,
    ) -> DeploymentList:
        """Deployments in the results database, oldest first, with their state and endpoints."""
        found = session.store.list_deployments(run_id=run_id, alive_only=alive_only)
        return DeploymentList(count=len(found), deployments=found)

    @mcp.tool(title="Tear down a deployment", annotations=DESTROYS)
    async def teardown(
        ctx: Context,
        deployment_id: Annotated[str, Field(description="id returned by deploy")],
        confirm: ConfirmArg = False,
    ) -> TeardownOutcome:
        """Stop everything a deployment runs (processes, clusters) and mark it terminated; repeating it is harmless.

        Without confirm=true it only says what it would stop and what it has cost so far.
        """
        from worldtune.tools.spend import run_spent_usd

        current = session.deployment(deployment_id)
        billed = run_spent_usd([current])
        if not confirm:
            return TeardownOutcome(
                done=False,
                needs_confirmation=True,
                message=f"would stop {current.id} ({current.plan} on {current.infra}, {current.state}); "
                "call again with confirm=true",
                billed_usd=billed,
                deployment=current,
            )
        from worldtune.tools import deploy as deploying

        await ctx.report_progress(0.0, 1.0, f"stopping {current.id}")
        with refusals():
            gone = await anyio.to_thread.run_sync(lambda: deploying.teardown(deployment_id, store=session.store))
        await ctx.report_progress(1.0, 1.0, f"{gone.id} is {gone.state}")
        return TeardownOutcome(
            done=True,
            needs_confirmation=False,
            message=f"{gone.id} is {gone.state}",
            billed_usd=run_spent_usd([gone]),
            deployment=gone,
        )

    # ---------- benchmarks and results ----------
    @mcp.tool(title="Start a benchmark", annotations=STARTS)
    def start_benchmark(
        deployment_id: Annotated[str, Field(description="the ready deployment to measure (from deploy)")],
        steps: Annotated[int, Field(ge=1, le=200, description="denoising steps of the full runs")] = 35,
        repeats: Annotated[int, Field(ge=1, le=1000, description="requests per client per level and per probe")] = 3,
        concurrency: Annotated[
            tuple[int, ...], Field(min_length=1, description="closed-loop levels (clients), e.g. [1, 2, 4]")
        ] = (1,),
        probe_steps: Annotated[
            tuple[int, ...],
            Field(description="short step counts probed first to fit latency = fixed + steps x per_step"),
        ] = (4, 8),
        warmup: Annotated[int, Field(ge=0, le=100, description="warm-up requests per endpoint (not counted)")] = 2,
        run_id: Annotated[str | None, Field(description="tuning run the benchmark belongs to")] = None,
        wait: Annotated[
            bool,
            Field(
                strict=True,
                description="if another benchmark measures this deployment: false refuses, true starts when it ends",
            ),
        ] = False,
        size: SizeArg = None,
        width: WidthArg = None,
        height: HeightArg = None,
        num_frames: FramesArg = None,
        fps: FpsArg = None,
        guidance_scale: GuidanceArg = None,
        flow_shift: FlowShiftArg = None,
        seed: SeedArg = None,
        guardrails: GuardrailsArg = None,
        prompt: PromptArg = None,
        negative_prompt: NegativePromptArg = None,
        max_sequence_length: MaxSequenceLengthArg = None,
        task: TaskArg = None,
    ) -> BenchmarkStatus:
        """Start a controlled benchmark against a ready deployment and return its id at once.

        Each request is the deployment model's anchor workload (its default size, frames, fps, guidance,
        prompt; guardrails off) with any workload argument given here changed, e.g. size="832x480",
        num_frames=121, guardrails=true; `steps` sets the full runs' step count. A value the model cannot
        take is refused naming the field and value, and nothing starts. Poll get_benchmark(benchmark_id)
        for status, progress and the result; every request is written to the results database as it
        completes, so nothing measured is lost; get_result's config holds the workload that was sent.
        """
        from worldtune.tools import benchmark as benchmarking
        from worldtune.tools import deploy as deploying
        from worldtune.tools.estimate import estimate as predict
        from worldtune.tools.workload import anchor_workload

        stored = session.deployment(deployment_id)  # a readable error for an unknown id
        changes = {
            "width": width, "height": height, "num_frames": num_frames, "fps": fps, "guidance_scale": guidance_scale,
            "flow_shift": flow_shift, "seed": seed, "guardrails": guardrails, "prompt": prompt,
            "negative_prompt": negative_prompt, "max_sequence_length": max_sequence_length, "task": task,
        }  # fmt: skip
        with refusals():  # a bad workload is refused before the infra is asked or anything starts
            changes.update(size_fields(size, width, height))
            try:
                workload = anchor_workload(stored.model, **{k: v for k, v in changes.items() if v is not None})
            except ValidationError as exc:
                raise ToolError(validation_message(exc)) from exc
        with refusals():  # ask the infra: a twin or cluster that died since is not benchmarked
            current = deploying.get_deployment(deployment_id, store=session.store)
        if current.state != "ready" or not current.endpoints:
            raise ToolError(f"deployment_id={deployment_id!r} is not valid: it is {current.state}, not ready")
        with refusals():
            # the client timeouts start from the prediction for the workload that is sent
            expected = predict(
                model=current.model, gpu=current.gpu, plan=current.plan, steps=steps, workload=workload
            ).latency_s
            spec = benchmarking.BenchmarkSpec(
                endpoints=current.endpoints, workload=workload, steps=steps, repeats=repeats,
                concurrency=list(concurrency), probe_steps=list(probe_steps), warmup=warmup,
                expected_latency_s=expected, deployment_id=deployment_id, run_id=run_id or current.run_id,
            )  # fmt: skip
            return benchmarking.start_benchmark(spec, str(session.store.path), wait=wait)

    @mcp.tool(title="Get a benchmark", annotations=READ_ONLY)
    async def get_benchmark(
        ctx: Context,
        benchmark_id: Annotated[str, Field(description="id returned by start_benchmark")],
        wait_s: Annotated[
            float, Field(ge=0, le=600, description="wait up to this long for it to finish, reporting progress")
        ] = 0.0,
    ) -> BenchmarkStatus:
        """A benchmark's status (running, completed, failed), progress from 0 to 1, requests done, and its result
        (final once completed, partial from the stored samples before)."""
        from worldtune.tools import benchmark as benchmarking

        session.benchmark_row(benchmark_id)  # a readable error for an unknown id
        path = str(session.store.path)
        deadline = time.monotonic() + wait_s
        while True:
            with refusals():
                status = await anyio.to_thread.run_sync(lambda: benchmarking.get_benchmark(benchmark_id, path))
            if status.status != "running" or time.monotonic() >= deadline:
                return status
            await ctx.report_progress(status.progress, 1.0, status.message or "running")
            await anyio.sleep(min(0.25, max(0.0, deadline - time.monotonic())))

    @mcp.tool(title="List benchmark results", annotations=READ_ONLY)
    def list_results(
        run_id: Annotated[str | None, Field(description="only this tuning run's benchmarks")] = None,
        limit: Annotated[int, Field(ge=1, le=1000, description="most results returned")] = 20,
    ) -> ResultList:
        """Benchmarks in the results database, newest first, with their headline figures."""
        rows = session.store.list_benchmarks(run_id=run_id, limit=limit)
        return ResultList(count=len(rows), results=[summary_from_row(r) for r in rows])

    @mcp.tool(title="Get a benchmark result", annotations=READ_ONLY)
    def get_result(
        benchmark_id: Annotated[str, Field(description="id from start_benchmark or list_results")],
        include_samples: Annotated[bool, Field(description="also return every measured request")] = False,
    ) -> ResultRecord:
        """One benchmark's full stored record: configuration, result (latency mean/median/percentiles with
        the sample counts that support them, per-step and fixed time, clips per hour) and optionally every sample."""
        from worldtune.tools import benchmark as benchmarking

        row = session.benchmark_row(benchmark_id)
        with refusals():
            status = benchmarking.get_benchmark(benchmark_id, str(session.store.path))
        samples = session.store.samples(benchmark_id)
        return ResultRecord(
            benchmark=status,
            config=row.get("config") or {},
            samples=samples if include_samples else None,
            sample_count=len(samples),
        )

    @mcp.tool(title="Compare benchmark results", annotations=READ_ONLY)
    def compare_results(
        benchmark_ids: Annotated[
            list[str],
            Field(min_length=2, max_length=20, description="two or more benchmark ids; the first is the base"),
        ],
    ) -> Comparison:
        """Compare stored benchmark results side by side: latency mean/median/p90/p95/p99, throughput, clips per
        hour, per-step and fixed time, and cost per clip (the deployment's node price / measured clips per hour;
        a twin is priced at the offer it stands in for), each with its change relative to the first."""
        rows = [session.benchmark_row(b) for b in benchmark_ids]
        found = {d: dep for row in rows if (d := row.get("deployment_id")) and (dep := session.store.get_deployment(d))}
        return compare(rows, found)

    # ---------- tuning runs (the agent, as a long job) ----------
    def tuner() -> Tuner:
        if session.tuner is None:
            raise ToolError("tuning is not available on this server: it was built without the agent "
                            "(build_server(tuner=AgentTuner()); `worldtune mcp` includes it)")  # fmt: skip
        return session.tuner

    def tuning_status(run_id: str) -> TuningStatus:
        with refusals():
            return TuningStatus.model_validate(tuner().status(run_id, session.db_path))

    @mcp.tool(title="Start a tuning run", annotations=STARTS)
    def start_tuning(
        goal: Annotated[
            str,
            Field(
                min_length=3,
                description="the goal in words, e.g. 'Cosmos3-Super, 720p 189-frame clips, p95 under 150 s, "
                "cheapest per clip, H200 or B200, spot ok, budget $300'",
            ),
        ],
        infra: InfraArg = "local",
        engine: Annotated[Literal["twin", "vllm-omni"], Field(description="twin (rehearsal) or vllm-omni")] = "twin",
        twin_profile: Annotated[
            str | list[str] | None,
            Field(description="twin only: profile YAML files or folders the twin runs with, one per GPU type"),
        ] = None,
        time_scale: Annotated[
            float, Field(gt=0, le=100000, description="twin only: divide its sleeps by this")
        ] = 300.0,
        budget_usd: Annotated[
            float | None, Field(gt=0, allow_inf_nan=False, description="overrides the goal's budget")
        ] = None,
        max_iterations: Annotated[int, Field(ge=1, le=200, description="most measurements")] = 30,
        confirm: Annotated[
            bool,
            Field(description="approve the run's spend up front; without it a paid run stops at the approval question"),
        ] = False,
        detach: Annotated[
            bool,
            Field(description="keep running after this MCP session ends (else the run stops and tears down with it)"),
        ] = False,
    ) -> TuningStatus:
        """Start the tuning agent on a goal and return its run id at once: it predicts, deploys, benchmarks,
        recalibrates and recommends the cheapest deployment that meets the goal, tearing down what it started.

        On infra local with the twin it spends nothing and runs without asking. Anywhere else it stops at an
        approval question showing its spend estimate unless confirm=true (answer with approve_tuning). An
        ambiguous goal is refused with the questions to answer. Poll get_tuning for progress and the result.
        The run ends with this MCP session (stopped, everything it started torn down) unless detach=true.
        """
        from worldtune.tools.spend import needs_confirmation
        from worldtune.tools.tuning import TuningRequest

        # the tuner checks the budget (this argument, or the goal text's) and the infra against the guardrails
        with refusals():
            paid = needs_confirmation(infra, engine)
            # each rehearsal truth must be a file this client may name (tools/profile_paths.py; no folders over MCP)
            if isinstance(twin_profile, list):
                twin_profile = [p for p in (allowed_profile(x, "twin_profile") for x in twin_profile) if p]
            else:
                twin_profile = allowed_profile(twin_profile, "twin_profile")
            request = TuningRequest(
                infra=infra, engine=engine, twin_profile=twin_profile, time_scale=time_scale, budget_usd=budget_usd,
                max_iterations=max_iterations, yes=confirm or not paid, db_path=session.db_path, detach=detach,
            )  # fmt: skip
            run_id = tuner().start(goal, request)
        return tuning_status(run_id)

    @mcp.tool(title="Get a tuning run", annotations=READ_ONLY)
    async def get_tuning(
        ctx: Context,
        run_id: Annotated[str, Field(description="id returned by start_tuning")],
        wait_s: Annotated[
            float, Field(ge=0, le=600, description="wait up to this long for it to finish, reporting progress")
        ] = 0.0,
    ) -> TuningStatus:
        """A tuning run's status, what it did so far (events, measurements, spend), whether it waits for approval,
        and once completed its recommendation with the measured and predicted figures."""
        deadline = time.monotonic() + wait_s
        while True:
            status = await anyio.to_thread.run_sync(lambda: tuning_status(run_id))
            if status.status != "running" or time.monotonic() >= deadline:
                return status
            last = status.events[-1] if status.events else "running"
            await ctx.report_progress(float(status.measurements), None, str(last))
            await anyio.sleep(min(0.5, max(0.0, deadline - time.monotonic())))

    @mcp.tool(title="Approve or stop a tuning run", annotations=DECIDES)
    def approve_tuning(
        run_id: Annotated[str, Field(description="a run waiting for approval (get_tuning says so)")],
        approve: Annotated[bool, Field(description="true: go ahead and spend; false: stop the run")],
    ) -> TuningStatus:
        """Answer a tuning run's approval question: approve its spend estimate (it continues) or decline (it stops)."""
        current = tuning_status(run_id)
        if not current.waiting_for_approval:
            raise ToolError(f"run_id={run_id!r} is not valid: it is {current.status}, not waiting for approval")
        with refusals():
            tuner().resume(run_id, approve, session.db_path)
        return tuning_status(run_id)

    from worldtune.tools import mcp_replan  # keep the node, change the plan (issue 18)

    mcp_replan.register(mcp, session)

    # ---------- provision: rent the nodes for a plan (paid) ----------
    @mcp.tool(title="Rent GPUs and start vLLM-Omni", annotations=RENTS)
    async def provision(
        ctx: Context,
        gpu: GpuArg,
        plan: PlanArg,
        infra: InfraArg,
        capacity: CapacityArg = "on-demand",
        model: ModelArg = "cosmos3-super",
        hours: HoursArg = 1.0,
        run_id: Annotated[str | None, Field(description="tuning run that pays for it")] = None,
        confirm: ConfirmArg = False,
        usd_per_hour: UsdPerHourArg = None,
    ) -> DeployOutcome:
        """Rent GPUs for a plan on a cloud or cluster and start vLLM-Omni on them (SkyPilot).

        Costs money: without confirm=true it only answers with the offer, price per hour, expected hours
        (provisioning + model load + `hours`) and cost. Refused when the budget guardrails
        (policies/guardrails.yaml, $WORLDTUNE_GUARDRAILS) do not allow it.
        """
        spend = quote_or_refuse(
            "provision", gpu=gpu, plan=plan, infra=infra, engine="vllm-omni", capacity=capacity, model=model,
            hours=hours, run_id=run_id, usd_per_hour=usd_per_hour,
        )  # fmt: skip
        if not confirm:
            return DeployOutcome(done=False, needs_confirmation=True, message=would(spend, "rent"), quote=spend)
        return await deploy(
            ctx, gpu=gpu, plan=plan, infra=infra, engine="vllm-omni", capacity=capacity, model=model, hours=hours,
            run_id=run_id, confirm=True, usd_per_hour=usd_per_hour,
        )  # fmt: skip
