"""The MCP server's resources (the anchor workload, profiles, deployments, results, guardrails) and prompts.

Registered when the server is built (they are cheap); each reads through the session's results database or a
word, and holds no logic of its own.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError
from pydantic import Field

from worldtune.tools.words.errors import WorldtuneError

if TYPE_CHECKING:
    from worldtune.tools.mcp.session import Session


def register_resources(mcp: MCPServer, session: Session) -> None:
    """worldtune:// resources: what estimates use, what is deployed, what was measured, what bounds spending."""

    @mcp.resource("worldtune://workload/anchor", mime_type="application/json")
    def anchor() -> str:
        """The anchor workload: what estimates and benchmarks use unless told otherwise (REFERENCE.md section 4)."""
        from worldtune.tools.words.workload import anchor_workload

        return anchor_workload().model_dump_json(indent=2)

    @mcp.resource("worldtune://profiles", mime_type="application/json")
    def profiles() -> str:
        """The calibrated performance-model profiles worldtune ships, one per GPU type."""
        from worldtune.policies.calibration import PROFILES_DIR

        return json.dumps(sorted(p.stem for p in PROFILES_DIR.glob("*.yaml")))

    @mcp.resource("worldtune://profiles/{gpu}", mime_type="application/json")
    def profile(gpu: str) -> str:
        """One GPU type's calibrated profile: effective rates, link bandwidth, fixed costs, load time, noise."""
        from worldtune.policies.calibration import shipped_profile

        try:
            return shipped_profile(gpu).model_dump_json(indent=2)
        except WorldtuneError as exc:
            raise ResourceNotFoundError(str(exc)) from exc

    @mcp.resource("worldtune://deployments", mime_type="application/json")
    def deployments() -> str:
        """Every deployment in the results database."""
        return json.dumps([d.model_dump(mode="json") for d in session.store.list_deployments()], indent=2)

    @mcp.resource("worldtune://deployments/{deployment_id}", mime_type="application/json")
    def deployment(deployment_id: str) -> str:
        """One deployment as stored."""
        found = session.store.get_deployment(deployment_id)
        if found is None:
            raise ResourceNotFoundError(f"no deployment {deployment_id!r}")
        return found.model_dump_json(indent=2)

    @mcp.resource("worldtune://results", mime_type="application/json")
    def results() -> str:
        """The newest 100 benchmarks with their headline figures."""
        from worldtune.tools.results.compare import summary_from_row

        rows = session.store.list_benchmarks(limit=100)
        return json.dumps([summary_from_row(r).model_dump(mode="json") for r in rows], indent=2)

    @mcp.resource("worldtune://results/{benchmark_id}", mime_type="application/json")
    def result(benchmark_id: str) -> str:
        """One benchmark's stored record (configuration, status, result)."""
        row = session.store.get_benchmark(benchmark_id)
        if row is None:
            raise ResourceNotFoundError(f"no benchmark {benchmark_id!r}")
        return json.dumps(row, indent=2, default=str)

    @mcp.resource("worldtune://guardrails", mime_type="application/json")
    def guardrails() -> str:
        """The budget guardrails in force (policies/guardrails.yaml with $WORLDTUNE_GUARDRAILS over it)."""
        from worldtune.tools.plans.spend import load_guardrails

        try:
            return load_guardrails().model_dump_json(indent=2)
        except WorldtuneError as exc:
            raise ResourceError(str(exc)) from exc


def register_prompts(mcp: MCPServer) -> None:
    """Prompts an IDE offers: the cheapest plan under a latency bound, and comparing stored results."""

    @mcp.prompt(title="Cheapest plan under a latency bound")
    def cheapest_plan_under_latency(
        latency_bound_s: Annotated[str, Field(description="most seconds one clip may take, e.g. 100")],
        model: Annotated[
            str, Field(description="cosmos3-super | cosmos3-nano | cosmos3-edge | cosmos3-super-i2v-4step")
        ] = "cosmos3-super",
        gpu: Annotated[str, Field(description="GPU type: H200 or B200")] = "H200",
    ) -> str:
        """Find the cheapest plan per clip whose predicted latency stays under a bound, then check it on the twin."""
        return (
            f"Find the cheapest way to serve {model} on {gpu} GPUs with latency per clip at most {latency_bound_s} s "
            "on the anchor workload.\n"
            f"1. Call list_plans with model={model}, gpu={gpu}, latency_bound_s={latency_bound_s}, sort=cost "
            "(try gpus=8, then 4, 2 and 1).\n"
            "2. Report the best plan of each GPU count: latency, cost per clip, clips per hour, the offer.\n"
            "3. Deploy the overall best on the twin (deploy infra=local engine=twin time_scale=200), run "
            "start_benchmark with steps=35 repeats=3, poll get_benchmark until completed, and compare the measured "
            "latency with the prediction.\n"
            "4. Tear the twin down (teardown confirm=true). Do not rent GPUs without asking me."
        )

    @mcp.prompt(title="Compare benchmark results")
    def compare_benchmarks(
        benchmark_ids: Annotated[
            str, Field(description="benchmark ids, comma-separated, the base first (list_results lists them)")
        ],
    ) -> str:
        """Compare stored benchmark results and say which deployment to keep."""
        return (
            f"Compare the benchmark results {benchmark_ids} with compare_results (the first is the base). "
            "Say which is fastest at p50 and (where claimable) p95, which makes the most clips per hour, and which "
            "is cheapest per clip given each deployment's price per hour (get_deployment). Quote the figures."
        )
