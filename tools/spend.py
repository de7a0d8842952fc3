"""Spending: what starting something would cost (a quote), and the budget guardrails that may refuse it.

The guardrails are YAML (policies/guardrails.yaml; $WORLDTUNE_GUARDRAILS names a file whose keys
replace the defaults). Every tool that rents GPUs quotes first and calls `check_spend`, which
refuses with an InvalidInput naming the field, the value and the limit, before anything starts.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from worldtune.tools.deployment import Deployment
from worldtune.tools.errors import InvalidInput
from worldtune.tools.offer import CAPACITIES, Offer

GUARDRAILS_FILE = Path(__file__).resolve().parent.parent / "policies" / "guardrails.yaml"
GUARDRAILS_ENV = "WORLDTUNE_GUARDRAILS"
# Infras that run on hardware the user already has: no rental price, but still real processes.
OWN_INFRAS = ("local", "slurm", "kubernetes")


class Guardrails(BaseModel):
    """Limits on spending: per action, per run, where and at which capacity."""

    model_config = ConfigDict(extra="forbid")

    max_usd_per_action: float = Field(ge=0, description="most one provision/deploy may be expected to cost")
    max_usd_per_run: float = Field(ge=0, description="most everything under one run id may cost together")
    allowed_infras: list[str] = Field(description="infra names (the part before '/', e.g. slurm)")
    allowed_capacities: list[str]
    max_hours_per_action: float = Field(default=8.0, gt=0, description="longest a paid deployment may be asked for")
    source: str = Field(default="", description="the files these limits were read from")


class SpendQuote(BaseModel):
    """What one action would rent and cost, before it is started."""

    action: str = Field(description="provision or deploy")
    model: str
    gpu: str
    plan: str
    gpus: int = Field(description="GPUs the plan needs")
    infra: str
    capacity: str
    offer: Offer | None = Field(default=None, description="the node that would be rented (None on own hardware)")
    usd_per_hour: float
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
    """The infra's name without its cluster part: slurm/mycluster -> slurm."""
    return infra.split("/", 1)[0].lower()


def needs_confirmation(infra: str, engine: str) -> bool:
    """Everything but the twin on this machine starts real processes on real (possibly paid) GPUs."""
    return not (infra_name(infra) == "local" and engine == "twin")


def quote(
    action: str,
    gpu: str,
    plan: str,
    infra: str = "local",
    capacity: str = "on-demand",
    model: str = "cosmos3-super",
    hours: float = 1.0,
) -> SpendQuote:
    """Quote an action: the cheapest offer on `infra` big enough for the plan, and the hours it would bill."""
    from worldtune.policies.perf_model import load_time_s
    from worldtune.tools.estimate import resolve_profile
    from worldtune.tools.gpus import get_gpu
    from worldtune.tools.models import get_model
    from worldtune.tools.offers import cheapest_fitting_offer
    from worldtune.tools.plan import Plan

    if capacity not in CAPACITIES:
        raise InvalidInput("capacity", capacity, f"one of {', '.join(CAPACITIES)}")
    if hours < 0:
        raise InvalidInput("hours", hours, "zero or more hours to keep it up")
    spec = get_gpu(gpu)
    parsed = Plan.parse(plan)
    load_s = load_time_s(get_model(model), resolve_profile(spec.name))
    kind = infra_name(infra)
    offer = cheapest_fitting_offer(spec.name, parsed.gpus, capacity=[capacity], infra=[kind])
    note = ""
    if offer is None:
        if kind not in OWN_INFRAS:
            raise InvalidInput(
                "infra",
                infra,
                f"an infra that rents {parsed.gpus}x{spec.name} at {capacity}",
                "list_offers shows which do",
            )
        note = f"{kind}: your own hardware, no rental price"
    price = offer.usd_per_hour if offer else 0.0
    provision_s = offer.provision_s if offer else 0.0
    expected_hours = (provision_s + load_s) / 3600.0 + hours
    return SpendQuote(
        action=action,
        model=get_model(model).key,
        gpu=spec.name,
        plan=str(parsed),
        gpus=parsed.gpus,
        infra=infra,
        capacity=capacity,
        offer=offer,
        usd_per_hour=price,
        provision_s=provision_s,
        load_s=load_s,
        hold_hours=hours,
        expected_hours=expected_hours,
        expected_usd=price * expected_hours,
        note=note,
    )


def check_spend(spend: SpendQuote, guardrails: Guardrails | None = None, spent_usd: float = 0.0) -> None:
    """Refuse (InvalidInput naming field, value and limit) an action the guardrails do not allow."""
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
            f"at most max_usd_per_run={rails.max_usd_per_run:g} (already spent {spent_usd:.2f})",
            f"{where}; tear something down or raise the limit",
        )


def run_spent_usd(deployments: list[Deployment], now: float | None = None) -> float:
    """USD billed so far by deployments (price per hour x hours from creation to termination or now)."""
    end_now = now or time.time()
    total = 0.0
    for d in deployments:
        end = d.terminated_at or end_now
        total += d.usd_per_hour * max(0.0, end - d.created_at) / 3600.0
    return total
