"""The MCP tool over GPU offers: list_offers (free, offline)."""

from __future__ import annotations

from typing import Annotated, Literal

from mcp.server.mcpserver import Context
from pydantic import BaseModel, Field

from worldtune.tools.mcp.common import READ_ONLY, CapacityArg, refusals, tool
from worldtune.tools.words.offer import Offer


class OfferEntry(Offer):
    """An offer with its id (infra/region/GPU:count/capacity)."""

    offer_id: str


class OfferList(BaseModel):
    """Offers matching the filters, cheapest per hour first."""

    count: int
    offers: list[OfferEntry]


@tool("List GPU offers", READ_ONLY)
def list_offers(
    ctx: Context,
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
    from worldtune.tools.plans.offers import list_offers as find_offers

    with refusals():
        found = find_offers(
            gpu=gpu,
            gpus=gpus,
            infra=[infra] if infra else None,
            capacity=[capacity] if capacity else None,
            source=source,
        )
    return OfferList(count=len(found), offers=[OfferEntry(**o.model_dump(), offer_id=o.id) for o in found])
