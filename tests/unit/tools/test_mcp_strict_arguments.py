"""Issue 36.4: every MCP tool refuses an unknown or misspelt field and a value of the wrong JSON type, naming it.

Before, `stpes: 50` ran 35 steps, `latency_bound` applied no bound and `"8"` was read as 8.
"""

from __future__ import annotations

from pathlib import Path

import anyio
from mcp import Client

from worldtune.tools.mcp.server import build_server
from worldtune.tools.store.database import Store


def text_of(result: object) -> str:
    return " ".join(getattr(c, "text", "") for c in getattr(result, "content", []))


def test_every_tool_publishes_and_enforces_no_unknown_fields(tmp_path: Path) -> None:
    db = tmp_path / "wt.db"

    async def main() -> None:
        async with Client(build_server(str(db))) as client:
            tools = (await client.list_tools()).tools
            assert len(tools) >= 25
            for tool in tools:
                assert tool.input_schema.get("additionalProperties") is False, tool.name
                result = await client.call_tool(tool.name, {"zz_misspelt": 1})
                said = text_of(result)
                assert result.is_error and "zz_misspelt is not a field of" in said, (tool.name, said)

    anyio.run(main)
    store = Store(db)
    assert store.list_deployments() == [] and store.list_runs() == [] and store.ledger() == []


def test_wrong_types_are_refused_not_coerced_and_json_shapes_still_pass(tmp_path: Path) -> None:
    async def main() -> None:
        async with Client(build_server(str(tmp_path / "wt.db"))) as client:
            for args, field in (({"plan": "tp8", "steps": "35"}, "steps"), ({"plan": "tp8", "stpes": 50}, "stpes"),
                                ({"plan": 8}, "plan"), ({"plan": "tp8", "steps": True}, "steps")):  # fmt: skip
                result = await client.call_tool("estimate", args)
                assert result.is_error and field in text_of(result), (args, text_of(result))
            ok = await client.call_tool("estimate", {"plan": "tp8", "steps": 35})
            assert not ok.is_error, text_of(ok)
            # a whole number for a float field, a JSON array for a list or tuple field: JSON's own types pass
            frontier = await client.call_tool("list_plans", {"gpu": "H200", "latency_bound_s": 200})
            assert not frontier.is_error, text_of(frontier)
            args = {"shape": "poisson", "gpus": ["H200"], "rate_per_hour": 60, "e2e_bound_s": 600}
            capacity = await client.call_tool("plan_capacity", args)
            assert not capacity.is_error, text_of(capacity)

    anyio.run(main)


def test_sizes_past_their_ceilings_are_refused_over_mcp_before_anything_starts(tmp_path: Path) -> None:
    db = tmp_path / "wt.db"

    async def main() -> None:
        async with Client(build_server(str(db))) as client:
            for tool, args, field in (
                ("start_benchmark", {"deployment_id": "wt-x", "concurrency": [1] * 100_000}, "concurrency"),
                ("start_benchmark", {"deployment_id": "wt-x", "probe_steps": [4] * 50_000}, "probe_steps"),
                ("start_benchmark", {"deployment_id": "wt-x", "repeats": 100_000}, "repeats"),
                ("start_tuning", {"goal": "cheapest per clip, p95 under 150 s", "budget_usd": 1e308}, "budget_usd"),
                ("deploy", {"gpu": "H200", "plan": "tp8", "hours": 1e6}, "hours"),
            ):
                result = await client.call_tool(tool, args)
                assert result.is_error and field in text_of(result), (tool, text_of(result)[:500])

    anyio.run(main)
    store = Store(db)
    assert store.list_deployments() == [] and store.list_runs() == [] and store.ledger() == []


def test_a_refused_argument_is_one_line_naming_the_tools_fields_and_never_a_huge_echo(tmp_path: Path) -> None:
    async def main() -> None:
        async with Client(build_server(str(tmp_path / "wt.db"))) as client:
            misspelt = text_of(await client.call_tool("estimate", {"plan": "tp8", "stpes": 50}))
            assert misspelt == ("Error executing tool estimate: stpes is not a field of estimate (its fields: plan, "
                                "model, gpu, steps, capacity, profile)")  # fmt: skip
            huge = text_of(
                await client.call_tool("start_benchmark", {"deployment_id": "x", "concurrency": [1] * 10**5})
            )
            assert "\n" not in huge and len(huge) < 400 and "100,000 items" in huge, huge
            endless = text_of(await client.call_tool("deploy", {"gpu": "H200", "plan": "tp8", "hours": 1e400}))
            assert "hours" in endless and "\n" not in endless, endless

    anyio.run(main)
