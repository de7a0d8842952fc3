"""What every MCP tool module shares: the annotations, the flat arguments, refusals, progress and binding.

A tool is a module-level function decorated with `@tool(title, annotations)`; registry.py registers it on each
server as it is, and it reaches the server's Session through its Context (session.session_of).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field, ValidationError

from worldtune.tools.words.deployment import Progress
from worldtune.tools.words.errors import WorldtuneError
from worldtune.tools.words.workload import SUPPORTED_FPS, SUPPORTED_SIZES

if TYPE_CHECKING:
    from worldtune.tools.mcp.session import Session

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
# Writes the results database only (no infra is asked, nothing starts or stops); repeating it is harmless.
RECORDS = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
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
        ge=0,
        le=720,
        allow_inf_nan=False,
        description="hours to keep it up once ready: the commitment counted against the guardrails, and on "
        "SkyPilot the hard autodown",
    ),
]
UsdPerHourArg = Annotated[
    float | None,
    Field(
        ge=0,
        le=100000,
        allow_inf_nan=False,
        description="your own cluster's price per node-hour (slurm/NAME, kubernetes); clouds use their offer",
    ),
]
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
FullArg = Annotated[
    bool,
    Field(
        strict=True,
        description="run the closed-loop levels at `steps` after the probes; false: the probes alone (a search's "
        "probe: the fit of latency = fixed + steps x per_step, without full-step clips)",
    ),
]


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


async def in_thread_with_progress(ctx: Context, work: Callable[[Progress], T]) -> T:
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


def allowed_profile(session: Session, path: str | None, field: str = "profile") -> str | None:
    """The profile file `path` names, if this session's client may have it read (tools/plans/profile_paths.py)."""
    from worldtune.tools.plans.profile_paths import allowed_profile_path

    return str(allowed_profile_path(path, session.origin, field)) if path else None


# Every tool, as its family module's `@tool` recorded it: "module.function" -> (function, title, annotations).
ToolSpec = tuple[Callable[..., Any], str, ToolAnnotations]
TOOLS: dict[str, ToolSpec] = {}
F = TypeVar("F", bound=Callable[..., Any])


def tool(title: str, annotations: ToolAnnotations) -> Callable[[F], F]:
    """Make the module-level function below an MCP tool, with its title and annotations.

    registry.py adds it to each server as it is (the SDK's own `server.tool()`), so the schema a client sees is
    the function's signature; its `ctx: Context` parameter is the SDK's and is not shown, and gives the
    server's Session (session.session_of).
    """

    def record(fn: F) -> F:
        TOOLS[f"{fn.__module__}.{fn.__qualname__}"] = (fn, title, annotations)
        return fn

    return record
