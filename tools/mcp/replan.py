"""MCP tool `replan_deployment`: keep the node, change the plan (a thin wrapper over tools/deployments/replan.py)."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context
from mcp_types import ToolAnnotations
from pydantic import BaseModel, Field

from worldtune.tools.deployments.replan import ReplanCheck
from worldtune.tools.mcp.common import ConfirmArg, HoursArg, in_thread_with_progress, refusals, tool
from worldtune.tools.mcp.session import session_of
from worldtune.tools.words.deployment import Deployment, Progress

# stops the running engine (its requests fail) but rents nothing: destructive, not idempotent
REPLANS = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=True)


class ReplanOutcome(BaseModel):
    """What a replan did, or (without confirm, on paid infra) what it would do."""

    done: bool = Field(description="true when the engine was restarted under the new plan")
    needs_confirmation: bool = Field(description="true when nothing was stopped because confirm was not true")
    message: str
    check: ReplanCheck
    deployment: Deployment | None = None


@tool("Change a deployment's plan in place", REPLANS)
async def replan_deployment(
    ctx: Context,
    deployment_id: Annotated[str, Field(description="the live deployment (from deploy)")],
    plan: Annotated[str, Field(description="the new plan, e.g. tp8 or cfg2-u4-hsdp8; at most the node's GPUs")],
    confirm: ConfirmArg = False,
    hours: Annotated[
        HoursArg | None,
        Field(
            description="hours to keep it up once the new plan is ready (checked against the guardrails like a "
            "deploy; on SkyPilot the new autodown); null keeps the deployment's own"
        ),
    ] = None,
) -> ReplanOutcome:
    """Stop a live deployment's engine and start it again under another plan on the node(s) it already holds.

    No new node is rented: SkyPilot submits a new serve job on the same cluster, Kubernetes rolls the pods
    on the same node pool, local restarts the twin. The load is warm (weights in page cache). The id,
    owner, ledger row and commitment stay. A plan needing more GPUs than the node has is refused. On paid
    infra, without confirm=true it only says what it would do.
    """
    session = session_of(ctx)
    from worldtune.tools.deployments import replan as replanning
    from worldtune.tools.plans.spend import needs_confirmation

    current = session.deployment(deployment_id)
    with refusals():
        check = replanning.check_replan(deployment_id, plan, store=session.store, hours=hours)
    what = f"{current.id}: {check.from_plan} -> {check.to_plan} on its {check.node_gpus} GPUs"
    if needs_confirmation(current.infra, current.engine) and not confirm:
        return ReplanOutcome(
            done=False,
            needs_confirmation=True,
            check=check,
            message=f"would restart {what} (warm load ~{check.warm_load_s:.0f} s, modelled)"
            + (
                f", kept {check.hours:g} h once ready (about ${check.extension_usd:.2f} more)"
                if check.hours is not None and check.extension_usd is not None
                else ""
            )
            + "; call again with confirm=true",
        )

    def work(progress: Progress) -> Deployment:
        with refusals():
            return replanning.replan(deployment_id, plan, store=session.store, progress=progress, hours=hours)

    await ctx.report_progress(0.0, 1.0, f"replanning {what}")
    ready = await in_thread_with_progress(ctx, work)
    await ctx.report_progress(1.0, 1.0, f"{ready.id} is {ready.state}")
    return ReplanOutcome(
        done=True,
        needs_confirmation=False,
        check=check,
        deployment=ready,
        message=f"{what}: {ready.state} at {', '.join(ready.endpoints) or '-'}",
    )
