"""Everything over MCP: a traffic goal driven with `worldtune tune --mcp-url` leaves nothing in the client's
results database (its twins, benchmarks, fleet rehearsal and record are the server's), and the session of
docs/mcp.md "From a goal to a report with the tools alone" runs call by call against the same server.

The server demands a bearer token (issue 36.2, as it does off loopback): the agent sends the one in
$WORLDTUNE_MCP_TOKEN, and without it, or with a wrong one, the run is refused in one line before it starts. (Issue 35
merged test_tune_rehearsal.py's remote-server tune here: one remote tuning run asserts both.)
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_cases import ok
from test_mcp_http import mcp_http

from worldtune.tools.store.database import Store

pytestmark = pytest.mark.integration

WORLDTUNE = Path(sys.executable).parent / "worldtune"
GOAL = ("Cosmos3-Super 480p 121-frame clips, 40 requests/hour, p95 under 10 min including queueing, "
        "cheapest per day, H200, budget $400")  # fmt: skip
TABLES = ("runs", "deployments", "benchmarks", "samples", "ledger", "owners")


def rows_in(db: Path) -> dict[str, int]:
    if not db.exists():
        return {}
    with sqlite3.connect(db) as con:
        present = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        return {t: int(con.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]) for t in TABLES if t in present}


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def test_a_remote_traffic_goal_writes_nothing_locally_and_the_documented_session_runs(tmp_path: Path) -> None:
    server_db, client = tmp_path / "server" / "results.db", tmp_path / "client"
    local_db = client / "results.db"
    server_db.parent.mkdir()
    client.mkdir()
    store = Store(server_db)
    token = "t-" + os.urandom(8).hex()
    with mcp_http(server_db, token_env=token) as url:
        # Every place the client could keep state is in its own folder: a local twin would log to <db folder>/logs
        # (tools/backends/local.py), a local store would be a database file there.
        env = {**{k: v for k, v in os.environ.items() if k != "WORLDTUNE_MCP_TOKEN"},
               "SKYPILOT_DISABLE_USAGE_COLLECTION": "1", "WORLDTUNE_DB": str(local_db),
               "XDG_DATA_HOME": str(client / "data"), "XDG_CACHE_HOME": str(client / "cache")}  # fmt: skip
        command = [str(WORLDTUNE), "tune", GOAL, "--mcp-url", url, "--yes", "--json", "--db", str(local_db)]
        for given in ({}, {"WORLDTUNE_MCP_TOKEN": "wrong"}):  # refused in one line, before anything starts
            refused = subprocess.run(command, env={**env, **given}, capture_output=True, text=True, timeout=300,
                                     stdin=subprocess.DEVNULL)  # fmt: skip
            said = refused.stdout + refused.stderr
            assert refused.returncode == 2 and "Traceback" not in said, said[-3000:]
            assert "HTTP 401" in said and "WORLDTUNE_MCP_TOKEN" in said and token not in said, said[-3000:]
        assert store.list_runs() == [] and store.list_deployments() == []
        done = subprocess.run(command, env={**env, "WORLDTUNE_MCP_TOKEN": token}, capture_output=True, text=True,
                              timeout=1200, stdin=subprocess.DEVNULL)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        out = json.loads(done.stdout)
        assert out["recommendation"]["plan"] and out["spend"]["deployments"] >= 1
        run = store.get_run(out["run_id"])  # the run's record is on the server (MCP record_run / mark_run)
        assert run is not None and run["status"] == "completed", run
        assert run["summary"]["recommendation"]["plan"] == out["recommendation"]["plan"]
        fleet = run["summary"]["fleet"]  # recorded on the server (record_fleet)
        assert fleet["rehearsal"] is not None and fleet["rehearsal"]["requests"] > 0, fleet
        assert fleet["rehearsal"] == out["fleet"]["rehearsal"]  # the one the client printed is the server's
        ledger = store.ledger()  # the run's twins and the rehearsal's: launched and torn down by the server
        assert len(ledger) >= 2 and all(r["gone_at"] is not None for r in ledger), ledger
        assert store.list_deployments(alive_only=True) == []
        owners = {r["run_id"] for r in ledger}  # the run's twins, and the rehearsal's (rehearse_fleet takes no run)
        assert out["run_id"] in owners and None in owners, ledger
        server_logs = files_under(server_db.parent / "logs")  # every twin ran on the server's side
        assert all(any(name.startswith(f"{r['deployment_id']}-r") for name in server_logs) for r in ledger)

        assert all(n == 0 for n in rows_in(local_db).values()), rows_in(local_db)  # nothing written locally
        left = [f for f in files_under(client) if not f.startswith("results-checkpoints.sqlite")]
        assert left in ([], ["results.db"]), left  # no twin logs, no other database; the graph's checkpoints
        assert not (client / "logs").exists()

        anyio.run(documented_session, url, store, token)


async def documented_session(url: str, store: Store, token: str) -> None:
    """docs/mcp.md, step by step, with the same arguments (the bearer token sent as an IDE's MCP config would)."""
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(300.0))
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        started = await ok(client, "start_tuning", {"goal": GOAL, "grace_s": 300})
        run_id = started["run_id"]
        status: dict[str, Any] = started
        deadline = time.monotonic() + 1200  # generous: CI is a loaded 2-core box; each call waits up to 60 s
        while status["status"] == "running":
            assert time.monotonic() < deadline, status
            status = await ok(client, "get_tuning", {"run_id": run_id, "wait_s": 60})
        assert status["status"] == "completed", status
        summary = status["summary"]
        assert summary["recommendation"] is not None and summary["measured"]
        plan = await ok(client, "plan_capacity", {"shape": "poisson", "rate_per_hour": 40, "e2e_bound_s": 600,
                                                  "gpus": ["H200"]})  # fmt: skip
        chosen = plan["chosen"]
        goal = {k: v for k, v in summary["goal"].items() if k not in ("text", "describe")}
        rehearsal = await ok(client, "rehearse_fleet", {"goal": goal, "fleet": chosen["fleet"],
                                                        "predicted_daily_cost_usd": chosen["daily_cost_usd"],
                                                        "requests": 40})  # fmt: skip
        assert rehearsal["requests"] == 40
        await ok(client, "record_fleet", {"run_id": run_id, "fleet": {"capacity": plan, "rehearsal": rehearsal}})
        report = await ok(client, "write_report", {"run_id": run_id})
        assert Path(report["files"]["html"]).is_file() and "<html" in report["html"].lower()
        left = await ok(client, "list_deployments", {"run_id": run_id, "alive_only": True})
        assert left["deployments"] == []
    run = store.get_run(run_id)
    assert run is not None and run["summary"]["fleet"]["rehearsal"]["requests"] == 40
