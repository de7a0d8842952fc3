"""The graph as LangGraph Studio / `langgraph dev` loads it: typed input/output forms, a context schema with
no callables, and a context that works with no fields at all (in-process tools, local twin) (issue 15)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("langgraph")

from worldtune.agent.configuration import Context
from worldtune.agent.graph import graph
from worldtune.agent.tools import McpTools
from worldtune.agent.tools_client import SessionPerCall

ROOT = Path(__file__).resolve().parents[3]


def test_input_and_output_schemas_are_forms() -> None:
    inputs = graph.get_input_jsonschema()
    assert "goal_text" in inputs["properties"] and "goal_text" in inputs.get("required", []), inputs
    outputs = graph.get_output_jsonschema()
    assert {"summary", "stop_reason", "events"} <= set(outputs["properties"]), outputs


def test_context_schema_has_only_plain_fields() -> None:
    schema = graph.get_context_jsonschema()
    assert schema is not None
    assert set(schema["properties"]) == {"db_path", "mcp_url"}, schema  # no client, no callable
    json.dumps(schema)


def test_a_context_from_nothing_has_in_process_tools(tmp_path: Path) -> None:
    context = Context(**{})  # what LangGraph builds from an empty context
    assert isinstance(context.tools, McpTools)  # the tools as words, over one in-process session per call
    session = context.tools.caller
    assert isinstance(session, SessionPerCall) and session.mcp_url is None
    context.progress("any", {})  # the default printer takes events silently
    assert Context(db_path=str(tmp_path / "r.db")).tools.caller.db_path == str(tmp_path / "r.db")


def test_langgraph_json_points_at_the_compiled_graph() -> None:
    config = json.loads((ROOT / "langgraph.json").read_text())
    path, name = config["graphs"]["worldtune"].split(":")
    assert (ROOT / path).is_file() and name == "graph"
    assert config["env"]["SKYPILOT_DISABLE_USAGE_COLLECTION"] == "1"
    assert ".langgraph_api/" in (ROOT / ".gitignore").read_text().split()


def test_read_goal_is_the_first_node() -> None:
    drawn = graph.get_graph()
    firsts = {e.target for e in drawn.edges if e.source == "__start__"}
    assert firsts == {"read_goal"}


def test_read_goal_parses_the_text_and_records_the_run(tmp_path: Path) -> None:
    import asyncio

    from langgraph.runtime import ExecutionInfo, Runtime

    from worldtune.agent.graph import read_goal
    from worldtune.tools.store.database import Store

    db = tmp_path / "r.db"

    def node(thread_id: str | None) -> Runtime[Context]:  # what LangGraph hands the node: its context and thread
        info = ExecutionInfo(checkpoint_id="", checkpoint_ns="", task_id="", thread_id=thread_id)
        return Runtime(context=Context(db_path=str(db)), execution_info=info)

    state = {"goal_text": "p95 under 150 s, cheapest per clip, H200, budget $50", "options": {"db_path": str(db)}}
    update = asyncio.run(read_goal(state, node("thread-1")))  # type: ignore[arg-type]
    assert update["run_id"] == "thread-1" and update["goal"].latency_bound_s == 150.0
    assert update["goal"].budget_usd == 50.0 and update["options"].infra == "local"
    assert update["options"].yes is True  # the local twin is free: no approval question
    paid = asyncio.run(read_goal({**state, "options": {"db_path": str(db), "infra": "nebius", "engine": "vllm-omni"}},
                                 node("thread-2")))  # type: ignore[arg-type]  # fmt: skip
    assert paid["options"].yes is False  # a paid run stops at the spend estimate
    assert Store(db).get_run("thread-1") is not None
    runner_state = {**state, "goal": update["goal"], "options": update["options"], "run_id": "thread-1"}
    assert asyncio.run(read_goal(runner_state, node(None))) == {}  # type: ignore[arg-type]  # the runner's path: untouched
    # a goal given as JSON (Studio's form) becomes the word, as the options do
    given = asyncio.run(read_goal({**state, "goal": update["goal"].model_dump(mode="json"), "run_id": "t"}, node(None)))  # type: ignore[arg-type]
    assert given["goal"] == update["goal"] and given["options"].db_path == str(db)
