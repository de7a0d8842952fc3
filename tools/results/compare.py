"""Stored benchmark results as headline summaries, and several compared side by side with $ per clip.

Plain capabilities over the stored rows (tools/store/database.py) and Deployment: the MCP tools list_results and
compare_results and the worldtune://results resource are thin wrappers over them. Every figure is what was
stored from a measurement (or a twin's simulation, as its result says); $/clip is the node's price over the
measured clips per hour, a twin priced at the offer it stands in for.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, Field

from worldtune.tools.words.deployment import Deployment


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


class ComparedKey(BaseModel):
    """One figure across the compared results, with the change relative to the first."""

    key: str
    values: list[float | None]
    change_vs_first: list[float | None] = Field(description="(value - first) / first; null when not computable")


class Comparison(BaseModel):
    """Side-by-side figures of several benchmark results."""

    benchmark_ids: list[str]
    figures: list[ComparedKey]


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
