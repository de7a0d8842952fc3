"""The MCP server in-process with the SDK's own client: schemas, annotations, every free tool, refusals, resources.

Nothing here starts a server process or an engine; the twin round trip runs in tests/integration.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp_cases import EXPECTED_TOOLS, ok, pure_tools, refused, spending_refusals

from worldtune.cli_mcp import is_loopback, serve, transport_security
from worldtune.tools.mcp.server import StaticTokenVerifier, WorldtuneServer, build_server
from worldtune.tools.results.compute import compute_result
from worldtune.tools.store.database import Store
from worldtune.tools.words.deployment import Deployment
from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.offer import Offer

READ_ONLY_TOOLS = {
    "list_offers", "validate_plan", "estimate", "list_plans", "get_deployment", "list_deployments",
    "get_benchmark", "list_results", "get_result", "compare_results", "get_tuning", "plan_capacity",
}  # fmt: skip


def with_client(db: Path, body: Callable[[Client, Store], Awaitable[None]]) -> None:
    """Run `body` against a fresh in-process server over the database at `db`."""

    async def main() -> None:
        async with Client(build_server(str(db))) as client:
            await body(client, Store(db))

    anyio.run(main)


def stored_benchmark(store: Store, benchmark_id: str, latencies: list[float], deployment_id: str) -> dict[str, Any]:
    """A completed benchmark written the way the benchmark runner writes one (samples, then the result)."""
    store.create_benchmark(
        benchmark_id, {"steps": 35, "endpoints": ["http://127.0.0.1:9"]}, deployment_id=deployment_id
    )
    t = 0.0
    for seq, latency in enumerate(latencies):
        sample = {"phase": "full", "steps": 35, "concurrency": 1, "ok": True, "latency_s": latency,
                  "server_time_s": latency - 0.5, "sent_at_model": t, "done_at_model": t + latency,
                  "video_seconds": 7.875}  # fmt: skip
        store.add_sample(benchmark_id, seq, sample)
        t += latency
    result = compute_result(store.samples(benchmark_id), benchmark_id=benchmark_id, steps=35)
    store.update_benchmark(benchmark_id, status="completed", progress=1.0, result=result.model_dump(mode="json"))
    return result.model_dump(mode="json")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The cached tool listing goes to a temporary folder, never the user's ~/.cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "worldtune"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "results.db"


def test_every_tool_is_listed_with_schemas_and_annotations(db: Path) -> None:
    async def body(client: Client, store: Store) -> None:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) >= EXPECTED_TOOLS
        for name, tool in tools.items():
            assert tool.description and len(tool.description) > 40, name
            assert tool.input_schema["type"] == "object" and "$defs" not in tool.input_schema, name  # flat parameters
            assert tool.output_schema is not None and tool.output_schema["type"] == "object", name
            ann = tool.annotations
            assert ann is not None, name
            assert ann.read_only_hint is (name in READ_ONLY_TOOLS), name
            if name in READ_ONLY_TOOLS:
                assert ann.idempotent_hint and not ann.destructive_hint, name
        assert tools["teardown"].annotations.destructive_hint  # type: ignore[union-attr]
        assert tools["provision"].annotations.open_world_hint  # type: ignore[union-attr]
        assert not tools["deploy"].annotations.idempotent_hint  # type: ignore[union-attr]
        estimate = tools["estimate"].input_schema["properties"]
        assert set(estimate) == {"model", "gpu", "plan", "steps", "capacity", "profile"}
        assert tools["estimate"].input_schema["required"] == ["plan"]
        assert {"confirm"} <= set(tools["provision"].input_schema["properties"])
        assert tools["provision"].input_schema["properties"]["confirm"]["default"] is False

    with_client(db, body)


def test_free_tools_answer_and_refuse_readably(db: Path) -> None:
    async def body(client: Client, store: Store) -> None:
        await pure_tools(client)

    with_client(db, body)


def test_paid_actions_quote_without_confirm_and_spend_nothing(db: Path) -> None:
    async def body(client: Client, store: Store) -> None:
        await spending_refusals(client, store)
        assert store.list_deployments() == []

    with_client(db, body)


def test_guardrails_override_refuses_an_infra(db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rails = tmp_path / "rails.yaml"
    rails.write_text("allowed_infras: [local]\n")
    monkeypatch.setenv("WORLDTUNE_GUARDRAILS", str(rails))

    async def body(client: Client, store: Store) -> None:
        args = {"gpu": "H200", "plan": "1gpu", "infra": "nebius", "capacity": "spot"}
        await refused(client, "provision", args, "infra='nebius'", "allowed_infras: local", str(rails))
        guard = json.loads((await client.read_resource("worldtune://guardrails")).contents[0].text)  # type: ignore[union-attr]
        assert guard["allowed_infras"] == ["local"]

    with_client(db, body)


def test_stored_results_are_listed_read_and_compared(db: Path) -> None:
    store = Store(db)
    offer = Offer(infra="nebius", gpu="H200", gpu_count=8, usd_per_hour=28.0)
    dep = Deployment(gpu="H200", plan="cfg2-u4-hsdp8", state="ready", endpoints=["http://127.0.0.1:9"], offer=offer)
    store.save_deployment(dep)
    first = stored_benchmark(store, "bm-first", [100.0, 110.0, 120.0], dep.id)
    stored_benchmark(store, "bm-second", [90.0, 99.0, 108.0], dep.id)

    async def body(client: Client, store: Store) -> None:
        listed = await ok(client, "list_results", {})
        assert [r["benchmark_id"] for r in listed["results"]] == ["bm-second", "bm-first"]
        assert listed["results"][1]["latency_mean"] == pytest.approx(110.0)
        record = await ok(client, "get_result", {"benchmark_id": "bm-first", "include_samples": True})
        assert record["benchmark"]["result"] == first and record["sample_count"] == 3 == len(record["samples"])
        status = await ok(client, "get_benchmark", {"benchmark_id": "bm-first"})
        assert status["status"] == "completed" and status["result"] == first
        compared = await ok(client, "compare_results", {"benchmark_ids": ["bm-first", "bm-second"]})
        mean = next(f for f in compared["figures"] if f["key"] == "latency_mean")
        assert mean["values"] == pytest.approx([110.0, 99.0]) and mean["change_vs_first"][1] == pytest.approx(-0.1)
        rate = next(f for f in compared["figures"] if f["key"] == "clips_per_hour")["values"]
        cost = next(f for f in compared["figures"] if f["key"] == "usd_per_clip")["values"]
        assert cost == pytest.approx([28.0 / rate[0], 28.0 / rate[1]])  # the offer's $/h over measured clips/h
        await refused(client, "compare_results", {"benchmark_ids": ["bm-first", "bm-none"]}, "bm-none", "bm-first")
        await refused(client, "get_result", {"benchmark_id": "bm-none"}, "bm-none")
        await refused(client, "start_benchmark", {"deployment_id": "wt-none"}, "wt-none", dep.id)

        # recorded as ready, but no twin process runs it: the infra is asked first, nothing is measured
        await refused(client, "start_benchmark", {"deployment_id": dep.id}, "failed, not ready")
        assert store.get_deployment(dep.id).state == "failed"  # type: ignore[union-attr]
        assert len(store.list_benchmarks()) == 2

    with_client(db, body)


def test_teardown_without_confirm_stops_nothing(db: Path) -> None:
    store = Store(db)
    dep = Deployment(gpu="H200", plan="1gpu", infra="nebius", engine="vllm-omni", state="ready", usd_per_hour=3.5)
    store.save_deployment(dep)

    async def body(client: Client, store: Store) -> None:
        would = await ok(client, "teardown", {"deployment_id": dep.id})
        assert would["needs_confirmation"] and not would["done"] and "confirm=true" in would["message"]
        assert would["billed_usd"] >= 0
        assert store.get_deployment(dep.id).state == "ready"  # type: ignore[union-attr]
        await refused(client, "teardown", {"deployment_id": "wt-none"}, "wt-none")
        await refused(client, "teardown", {"deployment_id": dep.id, "confirm": "yes please"}, "confirm")

    with_client(db, body)


def test_resources_and_prompts(db: Path) -> None:
    store = Store(db)
    dep = Deployment(gpu="H200", plan="1gpu", state="ready")
    store.save_deployment(dep)

    async def read(client: Client, uri: str) -> Any:
        return json.loads((await client.read_resource(uri)).contents[0].text)  # type: ignore[union-attr]

    async def body(client: Client, store: Store) -> None:
        uris = {str(r.uri) for r in (await client.list_resources()).resources}
        assert {"worldtune://workload/anchor", "worldtune://profiles", "worldtune://deployments"} <= uris
        templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
        assert {"worldtune://profiles/{gpu}", "worldtune://results/{benchmark_id}"} <= templates
        anchor = await read(client, "worldtune://workload/anchor")
        assert (anchor["width"], anchor["height"], anchor["num_frames"], anchor["steps"]) == (1280, 720, 189, 35)
        assert set(await read(client, "worldtune://profiles")) >= {"H200", "B200"}
        assert (await read(client, "worldtune://profiles/H200"))["gpu"] == "H200"
        assert [d["id"] for d in await read(client, "worldtune://deployments")] == [dep.id]
        assert (await read(client, f"worldtune://deployments/{dep.id}"))["plan"] == "1gpu"
        with pytest.raises(Exception, match="wt-none"):
            await client.read_resource("worldtune://deployments/wt-none")
        prompts = {p.name for p in (await client.list_prompts()).prompts}
        assert {"cheapest_plan_under_latency", "compare_benchmarks"} <= prompts
        text = await client.get_prompt("cheapest_plan_under_latency", {"latency_bound_s": "90", "gpu": "B200"})
        body_text = text.messages[0].content.text  # type: ignore[union-attr]
        assert "90 s" in body_text and "list_plans" in body_text and "gpu=B200" in body_text

    with_client(db, body)


def test_bearer_token_verifier_accepts_only_its_token() -> None:
    verifier = StaticTokenVerifier("s3cret")
    assert anyio.run(verifier.verify_token, "s3cret") is not None
    assert anyio.run(verifier.verify_token, "s3cre") is None
    assert anyio.run(verifier.verify_token, "") is None


def test_http_off_loopback_needs_a_token() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost") and is_loopback("127.0.0.2")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3") and not is_loopback("myhost")
    with pytest.raises(InvalidInput, match=r"host='0.0.0.0'.*--token"):
        serve("http", host="0.0.0.0", port=8765, token=None)
    with pytest.raises(InvalidInput, match="port"):
        serve("http", host="127.0.0.1", port=70000)
    wildcard = transport_security("0.0.0.0", [], [])
    assert wildcard is not None and not wildcard.enable_dns_rebinding_protection
    named = transport_security("0.0.0.0", ["gpu-box:8765"], ["http://gpu-box:8765"])
    assert named is not None and "gpu-box:8765" in named.allowed_hosts and "127.0.0.1:*" in named.allowed_hosts


def test_tools_list_is_served_from_the_cache_without_importing_the_tools(db: Path, _private_cache: Path) -> None:
    async def main() -> None:
        first = build_server(str(db), cache_tools=True)
        assert isinstance(first, WorldtuneServer) and not first.tools_registered
        built = await first.list_tools()
        assert first.tools_registered
        [cache] = list(_private_cache.glob("mcp-tools-*.json"))

        second = build_server(str(db), cache_tools=True)
        assert isinstance(second, WorldtuneServer)
        cached = await second.list_tools()
        assert not second.tools_registered  # answered without registering (importing) the tools
        assert [t.model_dump() for t in cached] == [t.model_dump() for t in built]
        async with Client(second) as client:
            got = await ok(client, "estimate", {"plan": "cfg2-u4-hsdp8"})
            assert got["valid"] and second.tools_registered

        cache.write_text("not json")  # a broken cache is rebuilt, never served
        third = build_server(str(db), cache_tools=True)
        assert isinstance(third, WorldtuneServer)
        assert [t.name for t in await third.list_tools()] == [t.name for t in built] and third.tools_registered

        (_private_cache / "mcp-tools-0ld.json").write_text("[]")
        fourth = build_server(str(db), cache_tools=True)
        cache.unlink()
        await fourth.list_tools()
        assert [p.name for p in _private_cache.glob("mcp-tools-*.json")] == [cache.name]  # older listings go

        cache.unlink()
        await build_server(str(db)).list_tools()  # in-process servers write no cache by default
        assert not cache.exists()

    anyio.run(main)


def test_a_server_built_without_the_agent_refuses_tuning_and_spends_nothing(tmp_path: Path) -> None:
    db = tmp_path / "r.db"

    async def main() -> None:
        async with Client(build_server(str(db))) as client:
            for tool, args in (("start_tuning", {"goal": "cheapest per clip, p95 under 150 s"}),
                               ("get_tuning", {"run_id": "tune-x"}),
                               ("approve_tuning", {"run_id": "tune-x", "approve": True})):  # fmt: skip
                await refused(client, tool, args, "tuning is not available on this server", "AgentTuner")
            await ok(client, "estimate", {"plan": "tp8"})  # the rest of the server works

    anyio.run(main)
    assert Store(db).list_runs(10) == [] and Store(db).list_deployments() == []
