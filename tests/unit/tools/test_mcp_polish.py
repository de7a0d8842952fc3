"""What an MCP client (Inspector, an IDE) shows a person: titles, described prompt arguments, typed schemas,
honest annotations, and a bearer challenge and resource metadata as RFC 6750 / RFC 9728 describe (issue 15).

In-process: the SDK's Client over the server object, and Starlette's TestClient over its HTTP app (no socket).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from starlette.testclient import TestClient

from worldtune.tools.mcp.server import build_server

TOKEN = "s3cret-test-token"
URL = "http://127.0.0.1:8765"
CLIENT = {"name": "t", "version": "1"}
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": CLIENT}}  # fmt: skip
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def _listing(db: Path) -> tuple[dict[str, Any], list[Any]]:
    found: dict[str, Any] = {}

    async def main() -> None:
        async with Client(build_server(str(db))) as client:
            found["tools"] = {t.name: t for t in (await client.list_tools()).tools}
            found["prompts"] = (await client.list_prompts()).prompts

    anyio.run(main)
    return found["tools"], found["prompts"]


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """Follow a $ref or the non-null branch of an anyOf to the object a field describes."""
    if "$ref" in node:
        return _resolve(schema, schema["$defs"][node["$ref"].rsplit("/", 1)[-1]])
    for branch in node.get("anyOf", []):
        if branch.get("type") != "null":
            return _resolve(schema, branch)
    return node


def test_every_tool_has_a_title_and_approve_tuning_is_destructive(tmp_path: Path) -> None:
    tools, _ = _listing(tmp_path / "r.db")
    untitled = [name for name, tool in tools.items() if not tool.title]
    assert not untitled, untitled
    assert len({tool.title for tool in tools.values()}) == len(tools)  # each reads differently in a list
    assert tools["approve_tuning"].annotations.destructive_hint is True  # approve=false stops the run


def test_tuning_status_names_the_spend_estimate_and_event_types(tmp_path: Path) -> None:
    tools, _ = _listing(tmp_path / "r.db")
    schema = tools["get_tuning"].output_schema
    props = schema["properties"]
    spend = _resolve(schema, props["spend_estimate"])
    assert {"usd", "gpu_hours", "budget_usd"} <= set(spend.get("properties", {})), spend
    assert props["events"]["items"] == {"type": "string"}, props["events"]


def test_every_prompt_argument_is_described(tmp_path: Path) -> None:
    _, prompts = _listing(tmp_path / "r.db")
    assert prompts
    for prompt in prompts:
        assert prompt.title, prompt.name
        for argument in prompt.arguments or []:
            assert argument.description, (prompt.name, argument.name)


def test_bearer_challenge_and_protected_resource_metadata() -> None:
    app = build_server(bearer_token=TOKEN, url=URL).streamable_http_app(host="127.0.0.1")
    with TestClient(app, base_url=URL) as http:
        bare = http.post("/mcp", json=INIT, headers=HEADERS)
        assert bare.status_code == 401
        challenge = bare.headers["www-authenticate"]
        assert challenge.startswith("Bearer") and "error=" not in challenge, challenge  # RFC 6750 section 3.1
        metadata_url = f"{URL}/.well-known/oauth-protected-resource/mcp"
        assert f'resource_metadata="{metadata_url}"' in challenge, challenge
        wrong = http.post("/mcp", json=INIT, headers={**HEADERS, "Authorization": "Bearer wrong"})
        assert wrong.status_code == 401 and 'error="invalid_token"' in wrong.headers["www-authenticate"]
        right = http.post("/mcp", json=INIT, headers={**HEADERS, "Authorization": f"Bearer {TOKEN}"})
        assert right.status_code == 200, right.text
        for path in ("/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"):
            meta = http.get(path)
            assert meta.status_code == 200, (path, meta.text)
            body = meta.json()
            assert body["resource"] == f"{URL}/mcp" and body["bearer_methods_supported"] == ["header"], body
            assert body["authorization_servers"], body
