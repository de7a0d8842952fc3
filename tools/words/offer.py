"""Offer: a GPU shape you can rent (infra, region, accelerator x count, capacity, price per hour)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Capacity = Literal["on-demand", "spot", "serverless"]
CAPACITIES: tuple[str, ...] = ("on-demand", "spot", "serverless")


class Offer(BaseModel):
    """One rentable node shape at one capacity and price."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    infra: str = Field(description="SkyPilot infra: nebius, aws, lambda, kubernetes, slurm/NAME, local")
    region: str = ""
    instance_type: str = ""
    gpu: str
    gpu_count: int = Field(ge=1)
    capacity: Capacity = "on-demand"
    usd_per_hour: float = Field(ge=0)
    source: str = Field(default="snapshot", description="catalog file or dated snapshot the price is from")
    as_of: str = ""
    provision_s: float = Field(default=300.0, ge=0, description="expected time from launch to a ready node")
    scale_to_zero: bool = Field(default=False, description="serverless: no charge while idle")
    preemptible: bool = False

    @property
    def id(self) -> str:
        region = f"/{self.region}" if self.region else ""
        return f"{self.infra}{region}/{self.gpu}:{self.gpu_count}/{self.capacity}"

    @property
    def usd_per_gpu_hour(self) -> float:
        return self.usd_per_hour / self.gpu_count

    def usd_per_clip(self, clips_per_hour: float) -> float:
        """Cost per clip = instance price per hour / clips per hour."""
        return self.usd_per_hour / clips_per_hour if clips_per_hour > 0 else float("inf")
