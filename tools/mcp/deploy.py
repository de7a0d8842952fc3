"""The MCP tools over deployments: deploy, get_deployment, list_deployments, teardown, provision.

Paid or destructive ones answer without confirm=true with what they would do and cost; the checks (plan,
infra, budget guardrails) are the deploy capability's (tools/deployments/deploy.py, tools/plans/spend.py), not this
layer's.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Annotated, Literal

import anyio.to_thread
from mcp.server.mcpserver import Context
from pydantic import BaseModel, Field

from worldtune.tools.mcp.common import (
    DESTROYS,
    READ_ONLY,
    READ_ONLY_LIVE,
    RENTS,
    STARTS,
    CapacityArg,
    ConfirmArg,
    GpuArg,
    HoursArg,
    InfraArg,
    ModelArg,
    PlanArg,
    UsdPerHourArg,
    in_thread_with_progress,
    refusals,
    tool,
    while_caller_waits,
)
from worldtune.tools.mcp.session import session_of
from worldtune.tools.plans.spend import SpendQuote
from worldtune.tools.words.deployment import Deployment, Progress

if TYPE_CHECKING:
    pass


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


def would(spend: SpendQuote, what: str) -> str:
    """What an unconfirmed call would do and cost, in one sentence."""
    where = spend.offer.id if spend.offer else spend.infra
    return (
        f"would {what} {spend.plan} ({spend.gpus}x{spend.gpu}) on {where} at ${spend.usd_per_hour:.2f}/h for "
        f"about {spend.expected_hours:.2f} h (provisioning {spend.provision_s:.0f} s + model load "
        f"{spend.load_s:.0f} s + {spend.hold_hours:g} h): about ${spend.expected_usd:.2f}. "
        "Call again with confirm=true to go ahead."
    )


@tool("Deploy a plan", STARTS)
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
    noise_seed: Annotated[
        int | None,
        Field(ge=0, lt=2**62, description="twin only: seed of its run-to-run noise (default: its own, from its id)"),
    ] = None,
    guardrails: Annotated[
        bool,
        Field(
            description="run Cosmos3's guardrails (vLLM-Omni's default; they load at start and check every request); "
            "off (the default, as the workload's) renders --no-guardrails"
        ),
    ] = False,
    twin_profiles: Annotated[
        list[str] | None,
        Field(
            description="twin only, instead of twin_profile: profile files the twin may serve; the first one for "
            "the GPU type is used (one for another GPU type is passed over), else the shipped profile"
        ),
    ] = None,
) -> DeployOutcome:
    """Start a plan on an infra with an engine and wait until it is ready; returns the deployment and its endpoints.

    infra=local with engine=twin runs a modelled vLLM-Omni server on this machine: free, no confirmation.
    Anything else starts real processes on (possibly rented) GPUs: without confirm=true it only answers with
    the offer, price per hour and expected hours (provisioning + model load + `hours`) and cost, and it
    respects the budget guardrails (policies/guardrails.yaml).
    """
    session = session_of(ctx)
    from worldtune.tools.deployments import deploy as deploying
    from worldtune.tools.plans.spend import needs_confirmation
    from worldtune.tools.words.deploy_request import DeployRequest

    given = DeployRequest(
        gpu=gpu, plan=plan, infra=infra, engine=engine, capacity=capacity, model=model, twin_profile=twin_profile,
        twin_profiles=twin_profiles or [], time_scale=time_scale, hours=hours, usd_per_hour=usd_per_hour,
        run_id=run_id, noise_seed=noise_seed, guardrails=guardrails,
    )  # fmt: skip
    with refusals():
        request = deploying.with_profile_for(given, session.origin)
        spend = deploying.quote_deploy(request, session.store)
    if needs_confirmation(infra, engine) and not confirm:
        return DeployOutcome(done=False, needs_confirmation=True, message=would(spend, f"deploy {engine}"), quote=spend)
    caller_gone = threading.Event()  # set when this call is cancelled: the deploy is then torn down

    def work(progress: Progress) -> Deployment:
        with refusals():
            return deploying.deploy_for_caller(caller_gone, request, session.store, progress, session.origin)

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


@tool("Get a deployment", READ_ONLY_LIVE)
def get_deployment(
    ctx: Context,
    deployment_id: Annotated[str, Field(description="id returned by deploy, e.g. wt-1a2b3c4d")],
) -> Deployment:
    """One deployment: its plan, offer, state (pending, loading, ready, failed, preempted, terminated),
    endpoints and price per hour."""
    session = session_of(ctx)
    from worldtune.tools.deployments import deploy as deploying

    session.deployment(deployment_id)  # a readable error for an unknown id
    with refusals():
        return deploying.get_deployment(deployment_id, store=session.store)


@tool("List deployments", READ_ONLY)
def list_deployments(
    ctx: Context,
    run_id: Annotated[str | None, Field(description="only this tuning run's deployments")] = None,
    alive_only: Annotated[bool, Field(description="only those not terminated or failed")] = False,
) -> DeploymentList:
    """Deployments in the results database, oldest first, with their state and endpoints."""
    session = session_of(ctx)
    found = session.store.list_deployments(run_id=run_id, alive_only=alive_only)
    return DeploymentList(count=len(found), deployments=found)


@tool("Tear down a deployment", DESTROYS)
async def teardown(
    ctx: Context,
    deployment_id: Annotated[str, Field(description="id returned by deploy")],
    confirm: ConfirmArg = False,
) -> TeardownOutcome:
    """Stop everything a deployment runs (processes, clusters) and mark it terminated; repeating it is harmless.

    Without confirm=true it only says what it would stop and what it has cost so far.
    """
    session = session_of(ctx)
    from worldtune.tools.plans.spend import run_spent_usd

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
    from worldtune.tools.deployments import deploy as deploying

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


@tool("Rent GPUs and start vLLM-Omni", RENTS)
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
    session = session_of(ctx)
    from worldtune.tools.deployments.deploy import quote_deploy
    from worldtune.tools.words.deploy_request import DeployRequest

    request = DeployRequest(
        gpu=gpu, plan=plan, infra=infra, engine="vllm-omni", capacity=capacity, model=model, hours=hours,
        run_id=run_id, usd_per_hour=usd_per_hour,
    )  # fmt: skip
    with refusals():
        spend = quote_deploy(request, session.store, action="provision")
    if not confirm:
        return DeployOutcome(done=False, needs_confirmation=True, message=would(spend, "rent"), quote=spend)
    return await deploy(
        ctx, gpu=gpu, plan=plan, infra=infra, engine="vllm-omni", capacity=capacity, model=model,
        hours=hours, run_id=run_id, confirm=True, usd_per_hour=usd_per_hour,
    )  # fmt: skip
