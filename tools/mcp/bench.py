"""The MCP tools over benchmarks: start_benchmark, get_benchmark.

The workload and the spec are assembled by tools/bench/request.py; this layer maps arguments and errors.
"""

from __future__ import annotations

import time
from typing import Annotated, Literal

import anyio
import anyio.to_thread
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field, ValidationError

from worldtune.tools.bench.benchmark import BenchmarkStatus
from worldtune.tools.mcp.common import (
    READ_ONLY,
    STARTS,
    FlowShiftArg,
    FpsArg,
    FramesArg,
    FullArg,
    GuardrailsArg,
    GuidanceArg,
    HeightArg,
    MaxSequenceLengthArg,
    NegativePromptArg,
    PromptArg,
    SeedArg,
    SizeArg,
    TaskArg,
    WidthArg,
    refusals,
    tool,
)
from worldtune.tools.mcp.session import session_of
from worldtune.tools.words.bench_spec import check_measures
from worldtune.tools.words.errors import describe
from worldtune.tools.words.limits import MAX_LEVELS, MAX_PROBES


@tool("Start a benchmark", STARTS)
def start_benchmark(
    ctx: Context,
    deployment_id: Annotated[str, Field(description="the ready deployment to measure (from deploy)")],
    steps: Annotated[int, Field(ge=1, le=200, description="denoising steps of the full runs")] = 35,
    repeats: Annotated[int, Field(ge=1, le=1000, description="requests per client per level and per probe")] = 3,
    concurrency: Annotated[
        tuple[int, ...],
        Field(min_length=1, max_length=MAX_LEVELS, description="closed-loop levels (clients), e.g. [1, 2, 4]"),
    ] = (1,),
    probe_steps: Annotated[
        tuple[int, ...],
        Field(
            max_length=MAX_PROBES,
            description="short step counts probed first to fit latency = fixed + steps x per_step",
        ),
    ] = (4, 8),
    warmup: Annotated[int, Field(ge=0, le=100, description="warm-up requests per endpoint (not counted)")] = 2,
    full: FullArg = True,
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
    api: Annotated[
        Literal["auto", "sync", "async"],
        Field(
            description="how requests are sent: sync (POST /v1/videos/sync, bounded by the server's sync timeout, "
            "600 s by default), async (a job each: create, poll, fetch, delete) or auto: async when the model "
            "predicts the clips, with their queue, could outlast the sync timeout"
        ),
    ] = "auto",
) -> BenchmarkStatus:
    """Start a controlled benchmark against a ready deployment and return its id at once.

    Each request is the deployment model's anchor workload (its default size, frames, fps, guidance,
    prompt; guardrails off) with any workload argument given here changed, e.g. size="832x480",
    num_frames=121, guardrails=true; `steps` sets the full runs' step count. A value the model cannot
    take is refused naming the field and value, and nothing starts. Poll get_benchmark(benchmark_id)
    for status, progress and the result; every request is written to the results database as it
    completes, so nothing measured is lost; get_result's config holds the workload that was sent.
    """
    session = session_of(ctx)
    from worldtune.tools.bench.request import benchmark_spec, benchmark_workload, start_on_deployment
    from worldtune.tools.deployments import deploy as deploying

    stored = session.deployment(deployment_id)  # a readable error for an unknown id
    with refusals():  # a bad workload is refused before the infra is asked or anything starts
        check_measures(full, probe_steps)
        try:
            workload = benchmark_workload(
                stored.model, size=size, width=width, height=height, num_frames=num_frames, fps=fps,
                guidance_scale=guidance_scale, flow_shift=flow_shift, seed=seed, guardrails=guardrails, prompt=prompt,
                negative_prompt=negative_prompt, max_sequence_length=max_sequence_length, task=task,
            )  # fmt: skip
        except ValidationError as exc:
            raise ToolError(describe(exc)) from exc
    with refusals():  # ask the infra: a twin or cluster that died since is not benchmarked
        current = deploying.get_deployment(deployment_id, store=session.store)
    with refusals():  # refused unless it is ready; the client timeouts start from the model's prediction
        spec = benchmark_spec(
            current, workload, steps, repeats, concurrency, probe_steps, warmup, run_id, api, full=full
        )
        return start_on_deployment(current, spec, session.store, wait=wait)


@tool("Get a benchmark", READ_ONLY)
async def get_benchmark(
    ctx: Context,
    benchmark_id: Annotated[str, Field(description="id returned by start_benchmark")],
    wait_s: Annotated[
        float, Field(ge=0, le=600, description="wait up to this long for it to finish, reporting progress")
    ] = 0.0,
    partial: Annotated[
        bool,
        Field(
            description="while it runs, include the partial result summarised from the samples so far (false: "
            "status and counts only, the cheap look for a poller that reads get_result when samples_done grows)"
        ),
    ] = True,
) -> BenchmarkStatus:
    """A benchmark's status (running, completed, failed), progress from 0 to 1, requests done, and its result
    (final once completed, partial from the stored samples before unless partial is false)."""
    session = session_of(ctx)
    from worldtune.tools.bench import benchmark as benchmarking

    session.benchmark_row(benchmark_id)  # a readable error for an unknown id
    path = str(session.store.path)
    deadline = time.monotonic() + wait_s
    while True:
        with refusals():  # the looks while it waits need no summary: only the answer does
            status = await anyio.to_thread.run_sync(lambda: benchmarking.get_benchmark(benchmark_id, path, False))
        if status.status != "running" or time.monotonic() >= deadline:
            if status.status == "running" and partial:
                with refusals():
                    status = await anyio.to_thread.run_sync(lambda: benchmarking.get_benchmark(benchmark_id, path))
            return status
        await ctx.report_progress(status.progress, 1.0, status.message or "running")
        await anyio.sleep(min(0.25, max(0.0, deadline - time.monotonic())))
