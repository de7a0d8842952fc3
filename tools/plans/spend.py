"""Spending: what starting something would cost (a quote), and the budget guardrails that may refuse it.

The guardrails are YAML (policies/guardrails.yaml; $WORLDTUNE_GUARDRAILS names a file whose keys
replace the defaults). Every tool that rents GPUs quotes first and calls `check_spend`, which
refuses with an InvalidInput naming the field, the value and the limit, before anything starts.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from worldtune.tools.words.deployment import ALIVE_STATES, Deployment
from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.infra import Infra
from worldtune.tools.words.limits import MAX_HOLD_HOURS, at_most
from worldtune.tools.words.offer import CAPACITIES, Offer
from worldtune.tools.words.plan import Plan, PlanField

GUARDRAILS_FILE = Path(__file__).resolve().parents[2] / "policies" / "guardrails.yaml"
GUARDRAILS_ENV = "WORLDTUNE_GUARDRAILS"
# Deployments whose commitment still counts: everything not yet failed or terminated.
LIVE_STATES = ALIVE_STATES


def finite(field: str, value: Any, expected: str) -> float:
    """`value` as a float, refused when it is not a finite number (inf, nan, 1e400 and bools are refused)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidInput(field, value, f"a finite number: {expected}")
    return float(value)


class Guardrails(BaseModel):
    """Limits on spending: per action, per run, everything at once, where and at which capacity."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    max_usd_per_action: float = Field(ge=0, description="most one provision/deploy may be expected to cost")
    max_usd_per_run: float = Field(ge=0, description="most everything under one run id may commit together")
    max_usd_committed: float = Field(
        default=300.0, ge=0, description="most everything live (any run, or none) may commit together"
    )
    allowed_infras: list[str] = Field(description="infra names (the part before '/', e.g. slurm)")
    allowed_capacities: list[str]
    max_hours_per_action: float = Field(default=8.0, gt=0, description="longest a paid deployment may be asked for")
    own_usd_per_hour: dict[str, float] = Field(
        default_factory=dict, description="price per node-hour of your own clusters, by infra (slurm/NAME, kubernetes)"
    )
    source: str = Field(default="", description="the files these limits were read from")


class SpendQuote(BaseModel):
    """What one action would rent and cost, before it is started."""

    action: str = Field(description="provision or deploy")
    model: str
    gpu: str
    plan: PlanField
    gpus: int = Field(description="GPUs the plan needs")
    infra: str
    capacity: str
    offer: Offer | None = Field(default=None, description="the node that would be rented (None on own hardware)")
    usd_per_hour: float
    price_source: str = Field(default="", description="offer, stated, guardrails own_usd_per_hour, or local (free)")
    provision_s: float = Field(description="expected seconds from launch to a node that runs commands")
    load_s: float = Field(description="expected seconds to load the model (perf_model.load_time_s)")
    hold_hours: float = Field(description="hours the caller asked to keep it up after it is ready")
    expected_hours: float = Field(description="provisioning + model load + hold, in hours")
    expected_usd: float = Field(description="usd_per_hour x expected_hours")
    note: str = ""


def _read_yaml(path: Path, what: str) -> dict[str, Any]:
    if not path.is_file():
        raise InvalidInput(what, str(path), "an existing guardrails YAML file")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise InvalidInput(what, str(path), "a YAML mapping of guardrail keys to values")
    return data


def load_guardrails(path: str | Path | None = None) -> Guardrails:
    """The defaults in policies/guardrails.yaml, with the keys of `path` (or $WORLDTUNE_GUARDRAILS) over them."""
    data = _read_yaml(GUARDRAILS_FILE, "guardrails")
    sources = [str(GUARDRAILS_FILE)]
    override = path or os.environ.get(GUARDRAILS_ENV)
    if override:
        data.update(_read_yaml(Path(override), GUARDRAILS_ENV))
        sources.append(str(override))
    try:
        return Guardrails(**data, source=" + ".join(sources))
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        raise InvalidInput(field, err.get("input"), err["msg"], f"in {' + '.join(sources)}") from exc


def infra_name(infra: str) -> str:
    """The infra's name without its cluster or region part: slurm/mycluster -> slurm (refused if malformed)."""
    return Infra.parse(infra).name


def needs_confirmation(infra: str | Infra, engine: str) -> bool:
    """Everything but the twin on this machine starts real processes on real (possibly paid) GPUs."""
    return not (Infra.parse(infra).is_local and engine == "twin")


def node_gpus(plan: Plan, capacity: str) -> int:
    """GPUs of the node one deployment rents: the whole plan's; serverless: one SkyServe replica's (world_size).

    SkyServe runs each replica of a serverless plan as its own server on its own node (sky/render.py's
    render_service: `accelerators: GPU:world_size`, up to `plan.replicas` of them), so that is the node priced."""
    return plan.world_size if capacity == "serverless" else plan.gpus


def nodes_at_most(plan: Plan, capacity: str) -> int:
    """How many such nodes can be up at once: serverless scales out to max_replicas = plan.replicas; else one."""
    return plan.replicas if capacity == "serverless" else 1


def peak_usd_per_hour(offer: Offer, plan: Plan, capacity: str) -> float:
    """The most a deployment on `offer` bills per hour: nodes_at_most of its node up at once."""
    return offer.usd_per_hour * nodes_at_most(plan, capacity)


def reference_offer(gpu: str, plan: Plan, capacity: str) -> Offer | None:
    """The cheapest node_gpus node anywhere: what a deployment on local twins or on your own hardware (Slurm,
    Kubernetes) would rent, so its cost per clip can be priced."""
    from worldtune.tools.plans.offers import cheapest_fitting_offer

    return cheapest_fitting_offer(gpu, node_gpus(plan, capacity), capacity=[capacity])


def rented_offer(gpu: str, plan: Plan, capacity: str, where: Infra) -> Offer | None:
    """The node a deployment on a cloud rents (None elsewhere): the cheapest on that cloud (and region) with
    node_gpus GPUs; refused, naming the infra, when the cloud rents no such node at that capacity."""
    from worldtune.tools.plans.offers import cheapest_fitting_offer

    if where.kind != "cloud":
        return None
    need = node_gpus(plan, capacity)
    offer = cheapest_fitting_offer(gpu, need, capacity=[capacity], infra=[str(where)])
    if offer is None:
        raise InvalidInput(
            "infra",
            str(where),
            f"an infra that rents {need}x{gpu} at capacity {capacity}",
            "list_offers (`worldtune plans`) shows which do",
        )
    return offer


def _price(
    where: Infra, gpu: str, plan: Plan, capacity: str, usd_per_hour: float | None
) -> tuple[Offer | None, float, str]:
    """The offer (if one is rented), the most it bills per hour and where the price comes from; refused if unknown.

    Serverless is priced at its peak: max_replicas nodes up at once (it bills less while scaled in, nothing at
    zero), so the guardrails bound the most it can spend."""
    offer = rented_offer(gpu, plan, capacity, where)
    if offer is not None:
        nodes = nodes_at_most(plan, capacity)
        scaled = f", up to {nodes} SkyServe replica nodes" if nodes > 1 else ""
        return offer, peak_usd_per_hour(offer, plan, capacity), f"offer {offer.id} ({offer.source}){scaled}"
    if usd_per_hour is not None:
        return None, finite("usd_per_hour", usd_per_hour, "zero or more USD per node-hour"), "stated by the caller"
    if where.is_local:
        return None, 0.0, "local: this machine, nothing rented"
    rails = load_guardrails()
    for key in (str(where), where.name):
        if key in rails.own_usd_per_hour:
            return None, rails.own_usd_per_hour[key], f"guardrails own_usd_per_hour[{key!r}]"
    # Own GPUs cost what the cluster's owner says they cost: worldtune will not count them as free.
    raise InvalidInput(
        "usd_per_hour",
        None,
        f"a price per node-hour for {where} (your own GPUs are not free to worldtune)",
        f"pass usd_per_hour (--usd-per-hour), or set own_usd_per_hour: {{{str(where)!r}: PRICE}} in guardrails",
    )


def check_hold_hours(hours: Any) -> float:
    """The hours asked to keep a deployment up: a finite number, zero or more (refused naming `hours`)."""
    hold = finite("hours", hours, "zero or more hours to keep it up")
    if hold < 0:
        raise InvalidInput("hours", hours, "zero or more hours to keep it up")
    at_most("hours", hold, MAX_HOLD_HOURS, "hours to keep it up once ready")
    return hold


def quote(
    action: str,
    gpu: str,
    plan: Plan,
    infra: str = "local",
    capacity: str = "on-demand",
    model: str = "cosmos3-super",
    hours: float = 1.0,
    usd_per_hour: float | None = None,
) -> SpendQuote:
    """Quote an action: the cheapest offer on `infra` big enough for the plan, and the hours it would bill.

    Serverless rents one SkyServe replica's node (rented_offer) and is priced at max_replicas of them (_price).

    Clouds are priced by their offers; `local` is free; Slurm and Kubernetes need `usd_per_hour` or the
    guardrails' own_usd_per_hour (refused without one).
    """
    from worldtune.policies.perf_model import load_time_s
    from worldtune.tools.plans.estimate import resolve_profile
    from worldtune.tools.words.gpus import get_gpu
    from worldtune.tools.words.models import get_model

    where = Infra.parse(infra)
    if capacity not in CAPACITIES:
        raise InvalidInput("capacity", capacity, f"one of {', '.join(CAPACITIES)}")
    hold = check_hold_hours(hours)
    spec = get_gpu(gpu)
    load_s = load_time_s(get_model(model), resolve_profile(spec.name))
    offer, price, source = _price(where, spec.name, plan, capacity, usd_per_hour)
    provision_s = offer.provision_s if offer else 0.0
    expected_hours = (provision_s + load_s) / 3600.0 + hold
    return SpendQuote(
        action=action,
        model=get_model(model).key,
        gpu=spec.name,
        plan=plan,
        gpus=plan.gpus,
        infra=str(where),
        capacity=capacity,
        offer=offer,
        usd_per_hour=price,
        price_source=source,
        provision_s=provision_s,
        load_s=load_s,
        hold_hours=hold,
        expected_hours=expected_hours,
        expected_usd=price * expected_hours,
        note="" if offer else f"{where.kind}: {source}",
    )


def check_spend(
    spend: SpendQuote,
    guardrails: Guardrails | None = None,
    spent_usd: float = 0.0,
    committed_usd: float = 0.0,
) -> None:
    """Refuse (InvalidInput naming field, value and limit) an action the guardrails do not allow.

    spent_usd: what the action's run has committed already (None run: 0); committed_usd: what every live
    deployment has committed, whatever its run. Both include the hours asked for, not only those billed.
    """
    rails = guardrails or load_guardrails()
    where = f"guardrails {rails.source}"
    if infra_name(spend.infra) not in rails.allowed_infras:
        raise InvalidInput("infra", spend.infra, f"one of allowed_infras: {', '.join(rails.allowed_infras)}", where)
    if spend.capacity not in rails.allowed_capacities:
        raise InvalidInput(
            "capacity", spend.capacity, f"one of allowed_capacities: {', '.join(rails.allowed_capacities)}", where
        )
    if spend.usd_per_hour > 0 and spend.hold_hours > rails.max_hours_per_action:
        raise InvalidInput(
            "hours", spend.hold_hours, f"at most max_hours_per_action={rails.max_hours_per_action}", where
        )
    cost = round(spend.expected_usd, 2)
    if cost > rails.max_usd_per_action:
        raise InvalidInput(
            "expected_usd",
            cost,
            f"at most max_usd_per_action={rails.max_usd_per_action:g}",
            f"{where}; ask for fewer hours",
        )
    total = round(spent_usd + spend.expected_usd, 2)
    if total > rails.max_usd_per_run:
        raise InvalidInput(
            "run_usd",
            total,
            f"at most max_usd_per_run={rails.max_usd_per_run:g} (already committed {spent_usd:.2f})",
            f"{where}; tear something down or raise the limit",
        )
    everything = round(committed_usd + spend.expected_usd, 2)
    if everything > rails.max_usd_committed:
        raise InvalidInput(
            "committed_usd",
            everything,
            f"at most max_usd_committed={rails.max_usd_committed:g} (live deployments commit {committed_usd:.2f})",
            f"{where}; tear something down or raise the limit",
        )


def check_tuning(infra: str, engine: str, budget_usd: float | None, field: str = "budget_usd") -> None:
    """Refuse a tuning run the guardrails do not allow, before it starts: where it runs and what it may spend.

    `budget_usd` is the run's budget whether it came as an argument or was read from the goal text
    (`field` says which), so "budget $5000" in words is bound exactly as budget_usd=5000 is.
    """
    from worldtune.tools.plans.offers import list_offers

    where = Infra.parse(infra)
    if budget_usd is not None:
        finite(field, budget_usd, "the most the search may spend, in USD")
    if not needs_confirmation(str(where), engine):
        return  # the twin on this machine spends nothing
    rails = load_guardrails()
    source = f"guardrails {rails.source}"
    if where.name not in rails.allowed_infras:
        raise InvalidInput("infra", infra, f"one of allowed_infras: {', '.join(rails.allowed_infras)}", source)
    if where.kind == "cloud" and not list_offers(infra=[str(where)]):
        priced = sorted({o.infra for o in list_offers()})
        raise InvalidInput(
            "infra",
            infra,
            f"a cloud worldtune has prices for: {', '.join(priced)}",
            "list_offers shows them; SkyPilot catalog files add more",
        )
    if budget_usd is not None and budget_usd > rails.max_usd_per_run:
        raise InvalidInput(field, budget_usd, f"at most max_usd_per_run={rails.max_usd_per_run:g}", source)


def deployment_commitment(d: Deployment, now: float | None = None) -> float:
    """USD a deployment commits: price x hours asked while it lives (or billed, if it ran longer); billed once gone."""
    billed = run_spent_usd([d], now)
    return max(billed, d.committed_usd) if d.state in LIVE_STATES else billed


def commitments(deployments: list[Deployment], run_id: str | None, now: float | None = None) -> tuple[float, float]:
    """(what `run_id` has committed, what every live deployment commits) over `deployments`."""
    run = sum(deployment_commitment(d, now) for d in deployments if run_id and d.run_id == run_id)
    live = sum(deployment_commitment(d, now) for d in deployments if d.state in LIVE_STATES)
    return run, live


def check_commitment(spend: SpendQuote, deployments: list[Deployment], run_id: str | None) -> None:
    """check_spend with the run's and everything's commitments read from `deployments` (the database's)."""
    run, live = commitments(deployments, run_id)
    check_spend(spend, spent_usd=run, committed_usd=live)


def extension(deployment: Deployment, hours: float, load_s: float, now: float | None = None) -> SpendQuote:
    """What keeping a live deployment for `hours` more (after a restart of `load_s`) commits: its price x
    (load + hours), on top of what it has billed so far (a replan with new hours: nothing new is rented)."""
    hold = check_hold_hours(hours)
    price = deployment.usd_per_hour
    expected_hours = load_s / 3600.0 + hold
    return SpendQuote(
        action="replan",
        model=deployment.model,
        gpu=deployment.gpu,
        plan=str(deployment.plan),
        gpus=deployment.offer.gpu_count if deployment.offer else 0,
        infra=str(deployment.infra),
        capacity=deployment.capacity,
        offer=deployment.offer,
        usd_per_hour=price,
        price_source="the deployment's own price",
        provision_s=0.0,
        load_s=load_s,
        hold_hours=hold,
        expected_hours=expected_hours,
        expected_usd=price * expected_hours,
        note=f"on top of ${run_spent_usd([deployment], now):.2f} billed so far",
    )


def check_extension(spend: SpendQuote, deployment: Deployment, deployments: list[Deployment]) -> float:
    """check_spend for an extension of `deployment`: the others' commitments plus what it has billed count
    already; returns the deployment's new commitment (billed so far + the extension)."""
    others = [d for d in deployments if d.id != deployment.id]
    run, live = commitments(others, deployment.run_id)
    billed = run_spent_usd([deployment])
    check_spend(spend, spent_usd=run + billed if deployment.run_id else 0.0, committed_usd=live + billed)
    return billed + spend.expected_usd


def run_spent_usd(deployments: list[Deployment], now: float | None = None) -> float:
    """USD billed so far by deployments (price per hour x hours from creation to termination or now)."""
    end_now = now or time.time()
    total = 0.0
    for d in deployments:
        end = d.terminated_at or end_now
        total += d.usd_per_hour * max(0.0, end - d.created_at) / 3600.0
    return total
