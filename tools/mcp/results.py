"""The MCP tools over stored results: list_results, get_result, compare_results (read-only).

Summaries and comparisons are tools/results/compare.py's; this layer looks rows up and wraps them.
"""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server.mcpserver import Context
from pydantic import BaseModel, Field

from worldtune.tools.bench.benchmark import BenchmarkStatus
from worldtune.tools.mcp.common import READ_ONLY, refusals, tool
from worldtune.tools.mcp.session import session_of
from worldtune.tools.results.compare import Comparison, ResultList, compare, summary_from_row


class ResultRecord(BaseModel):
    """One benchmark's full record, optionally with every sample."""

    benchmark: BenchmarkStatus
    config: dict[str, Any] = Field(description="what was measured and how (the BenchmarkSpec as stored)")
    samples: list[dict[str, Any]] | None = Field(default=None, description="every request measured (if asked)")
    sample_count: int


@tool("List benchmark results", READ_ONLY)
def list_results(
    ctx: Context,
    run_id: Annotated[str | None, Field(description="only this tuning run's benchmarks")] = None,
    limit: Annotated[int, Field(ge=1, le=1000, description="most results returned")] = 20,
) -> ResultList:
    """Benchmarks in the results database, newest first, with their headline figures."""
    session = session_of(ctx)
    rows = session.store.list_benchmarks(run_id=run_id, limit=limit)
    return ResultList(count=len(rows), results=[summary_from_row(r) for r in rows])


@tool("Get a benchmark result", READ_ONLY)
def get_result(
    ctx: Context,
    benchmark_id: Annotated[str, Field(description="id from start_benchmark or list_results")],
    include_samples: Annotated[bool, Field(description="also return every measured request")] = False,
) -> ResultRecord:
    """One benchmark's full stored record: configuration, result (latency mean/median/percentiles with
    the sample counts that support them, per-step and fixed time, clips per hour) and optionally every sample."""
    session = session_of(ctx)
    from worldtune.tools.bench import benchmark as benchmarking

    row = session.benchmark_row(benchmark_id)
    with refusals():
        status = benchmarking.get_benchmark(benchmark_id, str(session.store.path))
    samples = session.store.samples(benchmark_id)
    return ResultRecord(
        benchmark=status,
        config=row.get("config") or {},
        samples=[s.record() for s in samples] if include_samples else None,  # as stored: the fields measured
        sample_count=len(samples),
    )


@tool("Compare benchmark results", READ_ONLY)
def compare_results(
    ctx: Context,
    benchmark_ids: Annotated[
        list[str],
        Field(min_length=2, max_length=20, description="two or more benchmark ids; the first is the base"),
    ],
) -> Comparison:
    """Compare stored benchmark results side by side: latency mean/median/p90/p95/p99, throughput, clips per
    hour, per-step and fixed time, and cost per clip (the deployment's node price / measured clips per hour;
    a twin is priced at the offer it stands in for), each with its change relative to the first."""
    session = session_of(ctx)
    rows = [session.benchmark_row(b) for b in benchmark_ids]
    found = {d: dep for row in rows if (d := row.get("deployment_id")) and (dep := session.store.get_deployment(d))}
    return compare(rows, found)
