"""The MCP tools as a hostile client uses them: confirmation is a JSON true, caps bind, odd values are refused clearly.

In-process with the SDK's own Client. The cloud is tests/fake_cloud.py's recording stand-in (no cloud
can be reached here): it records what would have been launched, so a test can count it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import fake_cloud
import pytest
from mcp import Client

from worldtune.tools.backends import registry as backend_registry
from worldtune.tools.mcp.server import build_server
from worldtune.tools.plans.spend import GUARDRAILS_ENV
from worldtune.tools.store.database import Store
from worldtune.tools.words.deployment import Deployment

WORLDTUNE = str(Path(sys.executable).parent / "worldtune")
PAID = {"gpu": "H200", "plan": "cfg2-u4-hsdp8", "infra": "nebius", "hours": 3.2}


@pytest.fixture(autouse=True)
def _recording_cloud(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(GUARDRAILS_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(backend_registry, "SKY_BACKEND", fake_cloud.SEAM)
    fake_cloud.LAUNCHED.clear()


def with_client(db: Path, body: Callable[[Client, Store], Awaitable[None]]) -> None:
    async def main() -> None:
        async with Client(build_server(str(db))) as client:
            await body(client, Store(db))

    anyio.run(main)


async def call(client: Client, tool: str, args: dict[str, Any]) -> tuple[bool, str, dict[str, Any]]:
    result = await client.call_tool(tool, args)
    text = " ".join(getattr(c, "text", "") for c in result.content)
    return bool(result.is_error), text, result.structured_content or {}


def test_confirm_must_be_a_json_true(tmp_path: Path) -> None:
    async def body(client: Client, store: Store) -> None:
        for value in ("yes", "on", "true", 1):
            error, text, _ = await call(client, "provision", {**PAID, "confirm": value})
            assert error and "confirm" in text, text
        assert fake_cloud.LAUNCHED == [] and store.list_deployments() == []

    with_client(tmp_path / "wt.db", body)


def test_five_confirmed_provisions_under_one_run_stop_at_the_cap(tmp_path: Path) -> None:
    async def body(client: Client, store: Store) -> None:
        outcomes = [await call(client, "provision", {**PAID, "run_id": "run-R", "confirm": True}) for _ in range(5)]
        done = [o for o in outcomes if not o[0]]
        refused = [o[1] for o in outcomes if o[0]]
        assert len(done) == 3 == len(fake_cloud.LAUNCHED)  # was 5 ($470.85 against max_usd_per_run 300)
        assert all("run_usd=" in r and "max_usd_per_run=300" in r for r in refused), refused
        assert sum(d.committed_usd for d in store.list_deployments()) <= 300

    with_client(tmp_path / "wt.db", body)


def test_local_slash_anything_is_refused_not_read_as_local(tmp_path: Path) -> None:
    async def body(client: Client, store: Store) -> None:
        for infra in ("local/x", "local/evil", "slurm", "moon"):
            error, text, _ = await call(client, "deploy", {"gpu": "H200", "plan": "1gpu", "infra": infra})
            assert error and f"infra={infra!r} is not valid" in text, text
        assert store.list_deployments() == [] and store.ledger() == []  # no phantom pending deployment

    with_client(tmp_path / "wt.db", body)


def test_seed_and_flow_shift_are_bounded(tmp_path: Path) -> None:
    db = tmp_path / "wt.db"
    dep = Deployment(gpu="H200", plan="cfg2-u4-hsdp8", state="ready", endpoints=["http://127.0.0.1:9"])
    Store(db).save_deployment(dep)

    async def body(client: Client, store: Store) -> None:
        for args, field in (({"seed": 2**64}, "seed"), ({"seed": -(2**63) - 1}, "seed"),
                            ({"flow_shift": 1e9}, "flow_shift"), ({"flow_shift": 0}, "flow_shift")):  # fmt: skip
            error, text, _ = await call(client, "start_benchmark", {"deployment_id": dep.id, **args})
            assert error and field in text and "is not valid" in text, text
        assert store.list_benchmarks() == []

    with_client(db, body)


def test_an_over_long_profile_path_is_a_clear_refusal(tmp_path: Path) -> None:
    async def body(client: Client, store: Store) -> None:
        error, text, _ = await call(client, "estimate", {"plan": "tp8", "profile": "/" + "x" * 5000})
        assert error and "profile=" in text and "at most 1024 characters" in text, text

    with_client(tmp_path / "wt.db", body)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([WORLDTUNE, *args], capture_output=True, text=True, timeout=300)


def test_command_line_refuses_zero_time_scale_infinite_budget_and_a_missing_folder(tmp_path: Path) -> None:
    db = str(tmp_path / "wt.db")
    zero = cli("tune", "cheapest per clip, p95 under 150 s", "--time-scale", "0", "--db", db, "--json")
    assert zero.returncode == 2 and "time_scale" in zero.stdout, zero.stdout + zero.stderr  # was: 300
    inf = cli("tune", "cheapest per clip, p95 under 150 s", "--budget", "inf", "--db", db, "--json")
    assert inf.returncode == 2 and "budget" in inf.stdout, inf.stdout + inf.stderr
    json.loads(inf.stdout, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))
    Store(db).create_benchmark("bm-x", {"steps": 35})
    missing = cli("results", "export", "bm-x", "--out", str(tmp_path / "no" / "such" / "x.json"), "--db", db)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr, missing.stderr
    assert "out=" in missing.stderr and "does not exist" in missing.stderr
    azure = cli("tune", "cheapest per clip, p95 under 150 s", "--infra", "azure", "--db", db, "--json")
    assert azure.returncode == 2 and "infra='azure'" in azure.stdout, azure.stdout  # was exit 3, "no candidate"


def test_json_output_never_holds_infinity_or_nan() -> None:
    from worldtune.cli import finite_json

    assert finite_json({"a": float("inf"), "b": [float("nan"), 1.5], "c": "x"}) == {"a": None, "b": [None, 1.5],
                                                                                    "c": "x"}  # fmt: skip


def test_start_tuning_checks_the_goal_texts_budget_like_the_argument(tmp_path: Path) -> None:
    from worldtune.agent.tuner import AgentTuner

    async def main() -> list[str]:
        texts = []
        async with Client(build_server(str(tmp_path / "wt.db"), tuner=AgentTuner())) as client:
            for args in (
                {"goal": "cheapest per clip, p95 under 150 s, budget $5000", "infra": "nebius", "engine": "vllm-omni"},
                {"goal": "日本語🎥"},
                {"goal": "cheapest per clip, p95 under 150 s", "infra": "local/x"},
            ):
                error, text, _ = await call(client, "start_tuning", args)
                assert error, text
                texts.append(text)
        return texts

    budget, gibberish, infra = anyio.run(main)
    assert "goal budget=5000" in budget and "max_usd_per_run=300" in budget  # was: accepted
    assert "日本語🎥" in gibberish and "could not read" in gibberish  # was: the default goal, a full run
    assert "infra='local/x' is not valid" in infra
    assert Store(tmp_path / "wt.db").list_runs() == []
