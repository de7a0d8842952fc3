"""MCP tools plan_capacity and rehearse_fleet: short wrappers over tools/deployments/capacity.py and
tools/deployments/fleet_rehearsal.py (arguments -> capability -> result)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import anyio
from mcp.server.mcpserver import Context
from pydantic import BaseModel, Field, ValidationError

from worldtune.tools.deployments import capacity
from worldtune.tools.deployments.capacity import DEFAULT_PREEMPTIONS_PER_NODE_HOUR, CapacityPlan
from worldtune.tools.deployments.fleet_rehearsal import FleetRehearsal
from worldtune.tools.mcp.common import READ_ONLY, STARTS, ModelArg, allowed_profile, refusals, tool
from worldtune.tools.mcp.session import session_of
from worldtune.tools.words.errors import InvalidInput, describe
from worldtune.tools.words.fleet import Fleet
from worldtune.tools.words.goal import Goal
from worldtune.tools.words.traffic import Shape, Traffic, read_trace
from worldtune.tools.words.workload import anchor_workload

M = TypeVar("M", bound=BaseModel)

if TYPE_CHECKING:
    pass


@tool("Plan a fleet for traffic", READ_ONLY)
async def plan_capacity(
    ctx: Context,
    shape: Annotated[Shape, Field(description="poisson | daily_window | bursts | trace (give `trace`)")],
    e2e_bound_s: Annotated[
        float | None, Field(gt=0, allow_inf_nan=False, description="end-to-end bound incl. queueing (s)")
    ] = None,
    e2e_percentile: Annotated[int, Field(description="50, 90, 95 or 99")] = 95,
    rate_per_hour: Annotated[float | None, Field(description="poisson: requests per hour")] = None,
    clips_per_day: Annotated[float | None, Field(description="daily_window: clips in the window")] = None,
    window_start_h: Annotated[float, Field(description="daily_window: first hour (0-24)")] = 0.0,
    window_end_h: Annotated[float, Field(description="daily_window: end hour (0-24)")] = 24.0,
    burst_size: Annotated[int | None, Field(description="bursts: requests per burst")] = None,
    burst_every_s: Annotated[float | None, Field(description="bursts: period (s)")] = None,
    trace: Annotated[str | None, Field(description="trace: a CSV of arrival times (s) this client may name")] = None,
    model: ModelArg = "cosmos3-super",
    gpus: Annotated[tuple[str, ...], Field(description="GPU types allowed, e.g. ['H200']")] = ("H200",),
    capacities: Annotated[tuple[str, ...], Field(description="on-demand and/or spot (serverless is not modelled)")] = (
        "on-demand",
    ),
    max_gpus_per_node: Annotated[int, Field(ge=1, le=8)] = 8,
    preemptions_per_node_hour: Annotated[
        float, Field(ge=0, le=10, allow_inf_nan=False, description="assumed spot preemption rate")
    ] = DEFAULT_PREEMPTIONS_PER_NODE_HOUR,
) -> CapacityPlan:
    """The cheapest fleet (plan, offer, capacity, replica range, autoscaler) whose simulated days meet the
    traffic's end-to-end percentile bound, with SkyServe's default autoscaling beside it. Offline and free:
    every figure is simulated over the performance model's predictions (see the result's basis)."""
    session = session_of(ctx)
    with refusals():
        fields: dict[str, object] = dict(
            shape=shape,
            e2e_bound_s=e2e_bound_s,
            e2e_percentile=e2e_percentile,
            rate_per_hour=rate_per_hour,
            clips_per_day=clips_per_day,
            window_start_h=window_start_h,
            window_end_h=window_end_h,
            burst_size=burst_size,
            burst_every_s=burst_every_s,
        )
        if shape == "trace":
            if trace is None:
                raise InvalidInput("trace", None, "a CSV of arrival times for shape=trace")
            fields |= {"trace_path": trace, "trace_s": read_trace(trace, session.origin)}
        elif trace is not None:
            raise InvalidInput("trace", trace, f"no trace with shape={shape} (give shape=trace)")
        goal = Goal(
            workload=anchor_workload(model),
            gpus=list(gpus),
            capacities=list(capacities),
            max_gpus_per_node=max_gpus_per_node,
            traffic=Traffic.model_validate(fields),
        )
    with refusals():
        return await anyio.to_thread.run_sync(
            lambda: capacity.plan_capacity(goal, preemptions_per_node_hour=preemptions_per_node_hour)
        )


def _read(model: type[M], data: dict[str, Any], field: str) -> M:
    """`data` as `model` reads it; a clear refusal naming the field otherwise."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InvalidInput(field, "(given)", f"a {model.__name__} as its model reads it", describe(exc)) from exc


@tool("Rehearse a fleet on local twins", STARTS)
async def rehearse_fleet(
    ctx: Context,
    goal: Annotated[
        dict[str, Any], Field(description="the goal with traffic the fleet serves, as the Goal model reads it")
    ],
    fleet: Annotated[dict[str, Any], Field(description="the fleet to rehearse: plan_capacity's chosen fleet")],
    predicted_daily_cost_usd: Annotated[
        float, Field(ge=0, allow_inf_nan=False, description="the simulated day's cost, shown beside the billed one")
    ],
    twin_profiles: Annotated[
        list[str] | None,
        Field(
            description="profile files the twins may serve: the first one for the fleet's GPU type is used, "
            "else the shipped profile"
        ),
    ] = None,
    requests: Annotated[int, Field(ge=1, le=1000, description="open-loop arrivals sent")] = 40,
    time_scale: Annotated[float, Field(gt=0, le=100000, description="the twins divide their sleeps by this")] = 300.0,
) -> FleetRehearsal:
    """Rehearse a fleet on local twins: its warm nodes start as twin processes on this machine, the traffic's
    peak rate arrives open loop, then they are torn down. Free (twins only): the measured end-to-end percentile,
    queue wait, latency per request and billed daily cost beside the model's prediction for the same fleet."""
    session = session_of(ctx)
    from worldtune.tools.deployments.fleet_rehearsal import rehearse_on_first_profile

    with refusals():
        wanted, shape = _read(Goal, goal, "goal"), _read(Fleet, fleet, "fleet")
        traffic = wanted.traffic
        if traffic is None:
            raise InvalidInput("goal", "(given)", "a goal with traffic: its arrivals are what is rehearsed")
        paths = [p for p in (allowed_profile(session, x, "twin_profiles") for x in twin_profiles or []) if p]

    def run() -> FleetRehearsal:
        return rehearse_on_first_profile(
            shape,
            traffic,
            wanted.workload,
            predicted_daily_cost_usd,
            paths,
            requests=requests,
            time_scale=time_scale,
            store=session.store,
        )

    with refusals():
        return await anyio.to_thread.run_sync(run)
