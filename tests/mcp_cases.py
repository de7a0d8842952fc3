"""Shared MCP exercises: every tool with valid and invalid input, through whatever client a test connects.

Not a test module (no test_ prefix): the in-process, stdio and HTTP tests import it (tests/ is on
sys.path because tests/conftest.py lives there) and run the same calls over their transport.
"""

from __future__ import annotations

import json
import time
from typing import Any

from mcp import Client

from worldtune.tools.store.database import Store

TUNING_TOOLS = {"start_tuning", "get_tuning", "approve_tuning"}
GOAL = "Cosmos3-Super, 720p 189-frame clips, p95 under 150 s, cheapest per clip, H200 or B200, spot ok, budget $300"
EXPECTED_TOOLS = TUNING_TOOLS | {
    "list_offers",
    "validate_plan",
    "estimate",
    "list_plans",
    "provision",
    "deploy",
    "get_deployment",
    "list_deployments",
    "start_benchmark",
    "get_benchmark",
    "list_results",
    "get_result",
    "compare_results",
    "teardown",
    "heartbeat_run",
}
# A fast rehearsal: the anchor clip on cfg2-u4-hsdp8 takes ~120 model seconds, ~0.5 s of wall time here.
TWIN_TIME_SCALE = 250.0
TWIN = {"gpu": "H200", "plan": "cfg2-u4-hsdp8", "infra": "local", "engine": "twin", "time_scale": TWIN_TIME_SCALE}
BENCH = {"steps": 35, "repeats": 2, "concurrency": [1], "probe_steps": [4, 8], "warmup": 1}


Progress = list[tuple[float, float | None, str | None]]


async def ok(client: Client, tool: str, args: dict[str, Any], progress: Progress | None = None) -> dict[str, Any]:
    """Call a tool that must succeed; return its structured content (progress notifications go to `progress`)."""

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        if progress is not None:
            progress.append((done, total, message))

    result = await client.call_tool(tool, args, progress_callback=on_progress)
    text = result.content[0].text if result.content and hasattr(result.content[0], "text") else ""
    assert not result.is_error, f"{tool}({args}) failed: {text}"
    assert result.structured_content is not None, f"{tool} returned no structured content"
    return result.structured_content


async def refused(client: Client, tool: str, args: dict[str, Any], *words: str) -> str:
    """Call a tool that must fail with a readable error naming `words`; return the error text."""
    result = await client.call_tool(tool, args)
    assert result.is_error, f"{tool}({args}) should have been refused"
    text = " ".join(getattr(c, "text", "") for c in result.content)
    assert text.startswith(f"Error executing tool {tool}"), text
    for word in words:
        assert word in text, f"{word!r} not in {text!r}"
    return text


def cleanup(store: Store) -> None:
    """Tear down whatever a failed test left alive, so no twin outlives it."""
    from worldtune.tools.deployments.deploy import teardown

    for deployment in store.list_deployments(alive_only=True):
        teardown(deployment.id, store)


def nothing_spent(store: Store, before: int) -> None:
    """No deployment was added and no cluster was launched."""
    assert len(store.list_deployments()) == before
    assert store.ledger(open_only=True) == []


async def pure_tools(client: Client) -> None:
    """The free, offline tools: offers, plan checks, estimates, plan lists."""
    offers = await ok(client, "list_offers", {"gpu": "H200", "capacity": "spot"})
    assert offers["count"] == len(offers["offers"]) > 0
    assert all(o["gpu"] == "H200" and o["capacity"] == "spot" for o in offers["offers"])
    prices = [o["usd_per_hour"] for o in offers["offers"]]
    assert prices == sorted(prices)
    await refused(client, "list_offers", {"gpu": "Z100"}, "gpu='Z100'", "H200")

    check = await ok(client, "validate_plan", {"plan": "u4-cfg2-hsdp8", "gpu": "H200"})
    assert check["valid"] and check["plan"] == "cfg2-u4-hsdp8" and "--ulysses-degree" in " ".join(check["serve_flags"])
    bad_plan = await ok(client, "validate_plan", {"plan": "tp8-hsdp8"})
    assert not bad_plan["valid"] and bad_plan["rule"] == "hsdp-exclusive" and bad_plan["alternative"]
    await refused(client, "validate_plan", {"plan": "zz9"}, "plan='zz9'")

    est = await ok(client, "estimate", {"model": "cosmos3-super", "gpu": "H200", "plan": "cfg2-u4-hsdp8", "steps": 35})
    assert est["valid"] and est["latency_s"] > 0 and est["usd_per_clip"] > 0 and est["offer"]["gpu_count"] >= 8
    await refused(client, "estimate", {"plan": "cfg2-u4-hsdp8", "gpu": "Z100"}, "gpu='Z100'")
    await refused(client, "estimate", {"plan": "cfg2-u4-hsdp8", "steps": 0}, "steps", "greater than or equal to 1")

    plans = await ok(client, "list_plans", {"gpu": "H200", "gpus": 8, "latency_bound_s": 150, "sort": "cost"})
    assert plans["valid_count"] > plans["meeting_goal_count"] > 0 and plans["refused_count"] > 0
    assert plans["best"] == plans["plans"][0]["plan"]
    assert all(p["latency_s"] <= 150 for p in plans["plans"])
    assert set(plans["frontier"]) <= {p["plan"] for p in plans["plans"]} | set(plans["frontier"])
    await refused(client, "list_plans", {"gpus": 9}, "gpus", "less than or equal to 8")


async def spending_refusals(client: Client, store: Store) -> None:
    """Paid actions without confirm answer with a quote; bad or over-budget ones are refused; nothing is spent."""
    before = len(store.list_deployments())
    quote = await ok(
        client, "provision", {"gpu": "H200", "plan": "cfg2-u4-hsdp8", "infra": "nebius", "capacity": "spot"}
    )
    assert quote["needs_confirmation"] and not quote["done"] and quote["deployment"] is None
    q = quote["quote"]
    assert q["offer"]["infra"] == "nebius" and q["usd_per_hour"] > 0 and q["load_s"] > 0 and q["provision_s"] > 0
    assert q["expected_usd"] > 0 and "confirm=true" in quote["message"]
    await refused(
        client, "provision", {"gpu": "H200", "plan": "cfg2-u4-hsdp8", "infra": "aws", "hours": 5}, "max_usd_per_action"
    )
    paid = await ok(client, "deploy", {"gpu": "H200", "plan": "1gpu", "infra": "nebius", "engine": "vllm-omni"})
    assert paid["needs_confirmation"] and paid["quote"]["usd_per_hour"] > 0
    await refused(client, "deploy", {"gpu": "H200", "plan": "tp8-hsdp8"}, "hsdp-exclusive")
    await refused(client, "deploy", {"gpu": "H200", "plan": "1gpu", "engine": "tensorrt"}, "engine")
    nothing_spent(store, before)


async def twin_round_trip(client: Client, store: Store) -> None:
    """Deploy the twin, benchmark it twice while polling, read/compare results, tear it down."""
    progress: Progress = []
    deployed = await ok(client, "deploy", TWIN, progress)
    assert progress and progress[-1][0] == progress[-1][1] == 1.0, progress  # the long call reported progress
    assert deployed["done"] and not deployed["needs_confirmation"] and deployed["quote"]["expected_usd"] == 0
    dep = deployed["deployment"]
    assert dep["state"] == "ready" and dep["endpoints"]
    dep_id = dep["id"]

    got = await ok(client, "get_deployment", {"deployment_id": dep_id})
    assert got["id"] == dep_id and got["state"] == "ready"
    await refused(client, "get_deployment", {"deployment_id": "wt-nope"}, "wt-nope", dep_id)
    listed = await ok(client, "list_deployments", {"alive_only": True})
    assert dep_id in [d["id"] for d in listed["deployments"]]
    await refused(client, "list_deployments", {"alive_only": "maybe"}, "alive_only")

    bench_ids = []
    for _ in range(2):
        started = await ok(client, "start_benchmark", {"deployment_id": dep_id, **BENCH})
        assert started["status"] == "running" and started["id"].startswith("bm-")
        bench_ids.append(started["id"])
        # poll while it runs; the client keeps asking until it is done
        polls = 0
        deadline = time.monotonic() + 120
        status = started
        while status["status"] == "running":
            assert time.monotonic() < deadline, f"benchmark {started['id']} still running: {status}"
            status = await ok(client, "get_benchmark", {"benchmark_id": started["id"]})
            polls += 1
            time.sleep(0.05)
        assert status["status"] == "completed", status
        assert polls >= 1
        record = store.get_benchmark(started["id"])
        assert record is not None and record["status"] == "completed"
        # the result the client got is the record the database holds
        assert json.loads(json.dumps(status["result"])) == record["result"]
        assert status["result"]["completed_requests"] == BENCH["repeats"]
        assert status["result"]["latency_mean"] > 0
    await refused(client, "start_benchmark", {"deployment_id": "wt-nope"}, "wt-nope")
    await refused(client, "start_benchmark", {"deployment_id": dep_id, "steps": 500}, "steps")

    waited = await ok(client, "get_benchmark", {"benchmark_id": bench_ids[0], "wait_s": 1})
    assert waited["status"] == "completed"
    await refused(client, "get_benchmark", {"benchmark_id": "bm-nope"}, "bm-nope")

    results = await ok(client, "list_results", {"limit": 10})
    assert set(bench_ids) <= {r["benchmark_id"] for r in results["results"]}
    await refused(client, "list_results", {"limit": 0}, "limit")

    full = await ok(client, "get_result", {"benchmark_id": bench_ids[1], "include_samples": True})
    assert full["sample_count"] == len(full["samples"]) == len(store.samples(bench_ids[1])) > 0
    assert full["benchmark"]["result"] == store.get_benchmark(bench_ids[1])["result"]  # type: ignore[index]
    await refused(client, "get_result", {"benchmark_id": "bm-nope"}, "bm-nope")

    compared = await ok(client, "compare_results", {"benchmark_ids": bench_ids})
    mean = next(f for f in compared["figures"] if f["key"] == "latency_mean")
    assert mean["values"][0] > 0 and mean["change_vs_first"][0] == 0
    cost = next(f for f in compared["figures"] if f["key"] == "usd_per_clip")
    assert all(v is not None and v > 0 for v in cost["values"])  # a twin is priced at the offer it stands in for
    await refused(client, "compare_results", {"benchmark_ids": [bench_ids[0]]}, "benchmark_ids")

    would = await ok(client, "teardown", {"deployment_id": dep_id})
    assert would["needs_confirmation"] and not would["done"]
    assert store.get_deployment(dep_id).state == "ready"  # type: ignore[union-attr]
    gone = await ok(client, "teardown", {"deployment_id": dep_id, "confirm": True})
    assert gone["done"] and gone["deployment"]["state"] == "terminated"
    assert store.get_deployment(dep_id).state == "terminated"  # type: ignore[union-attr]
    await refused(client, "teardown", {"deployment_id": "wt-nope", "confirm": True}, "wt-nope")


async def finished_tuning(client: Client, run_id: str, waiting_ok: bool = False) -> dict[str, Any]:
    """Poll get_tuning (with progress) until the run completes, fails or (if allowed) waits for approval."""
    deadline = time.monotonic() + 300
    while True:
        status = await ok(client, "get_tuning", {"run_id": run_id, "wait_s": 2})
        if status["status"] != "running" and (waiting_ok or not status["waiting_for_approval"]):
            return status
        assert time.monotonic() < deadline, f"tuning run {run_id} still running: {status}"


async def tuning_round_trip(client: Client, store: Store, twin_run: bool = True, paid_run: bool = True) -> None:
    """The agent as a long job: a free twin run to its recommendation; a paid run stopped at its approval."""
    await refused(client, "start_tuning", {"goal": "make it fast"}, "start_tuning")
    await refused(client, "start_tuning", {"goal": GOAL, "infra": "nebius", "budget_usd": 5000}, "max_usd_per_run")
    await refused(client, "get_tuning", {"run_id": "tune-nope"}, "tune-nope")
    if twin_run:
        await twin_tuning(client, store)
    if paid_run:
        await paid_tuning_declined(client, store)


async def twin_tuning(client: Client, store: Store) -> None:
    """A tuning run on the local twin, polled until it recommends a verified deployment."""
    started = await ok(client, "start_tuning", {"goal": GOAL})
    assert started["run_id"].startswith("tune-")
    done = await finished_tuning(client, started["run_id"])
    assert done["status"] == "completed", done
    summary = done["summary"]
    assert summary is not None and summary["recommendation"]["plan"] and summary["measured"]["latency_p95_s"] <= 150
    assert store.list_deployments(alive_only=True) == []  # the agent tore down what it started


async def paid_tuning_declined(client: Client, store: Store) -> None:
    """A run on a paid infra stops at its approval question; declining it spends nothing."""
    before = len(store.list_deployments())
    paid = await ok(client, "start_tuning", {"goal": GOAL, "infra": "nebius", "engine": "vllm-omni"})
    waiting = await finished_tuning(client, paid["run_id"], waiting_ok=True)
    assert waiting["waiting_for_approval"] and waiting["spend_estimate"]["usd"] > 0, waiting
    await ok(client, "approve_tuning", {"run_id": paid["run_id"], "approve": False})
    declined = await finished_tuning(client, paid["run_id"])
    assert declined["status"] != "running" and not declined["waiting_for_approval"]
    nothing_spent(store, before)
    await refused(client, "approve_tuning", {"run_id": paid["run_id"], "approve": True}, "not waiting for approval")
