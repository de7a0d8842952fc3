"""A run belongs to its client: an HTTP MCP client killed with SIGKILL mid-run gets its run abandoned and torn
down by the server within the grace plus one sweep (samples kept); a detached run goes on.

The client is a real child process (tests/integration/run_client.py) that starts runs with start_tuning and
heartbeats them; the server is `worldtune mcp --transport http --run-grace-s 5` with a 1 s sweep. The test
waits on the results database's state (each wait bounded), never on a fixed sleep.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_mcp_http import mcp_http

from worldtune.tools.store.database import Store

pytestmark = pytest.mark.integration

CLIENT = Path(__file__).with_name("run_client.py")
GRACE_S = 5.0
SWEEP_S = 1.0
TEARDOWN_BOUND_S = 90.0  # grace + sweep + the runner's teardown on a loaded 2-core machine
GOAL = "Cosmos3-Super, 720p 189-frame clips, p95 under 150 s, cheapest per clip, H200, budget $300"


def wait_for(what: str, check: Callable[[], Any], bound_s: float) -> Any:
    """Poll the database state `check` until it is truthy; fail naming `what` after `bound_s`."""
    deadline = time.monotonic() + bound_s
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out after {bound_s:.0f} s waiting for {what}"
        time.sleep(0.2)


def samples_of(db: Path, run_id: str) -> int:
    with sqlite3.connect(db) as con:
        row = con.execute(
            "SELECT COUNT(*) FROM samples s JOIN benchmarks b ON b.id = s.benchmark_id WHERE b.run_id = ?", (run_id,)
        ).fetchone()
    return int(row[0])


def client_row(db: Path, run_id: str) -> dict[str, Any] | None:
    with sqlite3.connect(db) as con:
        con.row_factory = sqlite3.Row
        row = con.execute("SELECT * FROM run_clients WHERE run_id = ?", (run_id,)).fetchone()
    return dict(row) if row else None


def start_client(url: str, db: Path, *runs: str) -> tuple[subprocess.Popen[str], list[str]]:
    """The child client: starts one run per argument ('attached' or 'detached'), prints their ids, heartbeats."""
    env = {**os.environ, "SKYPILOT_DISABLE_USAGE_COLLECTION": "1"}
    cmd = [sys.executable, str(CLIENT), url, GOAL, str(GRACE_S), *runs]
    child = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    ids = [child.stdout.readline().strip() for _ in runs]
    assert all(i.startswith("tune-") for i in ids), (ids, child.poll())
    return child, ids


def test_killed_client_abandons_its_run_and_a_detached_run_goes_on(tmp_path: Path) -> None:
    db = tmp_path / "results.db"
    store = Store(db)
    os.environ["WORLDTUNE_RUN_SWEEP_S"] = str(SWEEP_S)  # read by the server the fixture starts
    detached = ""
    try:
        with mcp_http(db, "--run-grace-s", str(GRACE_S)) as url:
            child, (attached, detached) = start_client(url, db, "attached", "detached")
            try:
                wait_for("a sample of the attached run", lambda: samples_of(db, attached) > 0, 300)
                wait_for("a deployment of the detached run",
                         lambda: store.list_deployments(run_id=detached, alive_only=True), 300)  # fmt: skip
            finally:
                child.send_signal(signal.SIGKILL)
                child.wait()
            killed_at = time.time()
            kept = samples_of(db, attached)

            row = wait_for("the attached run abandoned and torn down",
                           lambda: (c := client_row(db, attached)) and c["torn_down_at"] is not None and c,
                           TEARDOWN_BOUND_S)  # fmt: skip
            run = store.get_run(attached)
            assert run is not None and run["status"] == "abandoned", run
            assert "no heartbeat" in run["summary"]["abandoned"], run["summary"]
            # abandoned after the grace, not before it: the heartbeat was fresh until the kill
            assert row["abandoned_at"] - killed_at >= GRACE_S - SWEEP_S - 1.5, (row, killed_at)
            assert store.list_deployments(run_id=attached, alive_only=True) == []
            assert samples_of(db, attached) >= kept > 0  # every sample kept
            ledger = [r for r in store.ledger() if r.get("run_id") == attached]
            assert ledger and all(r["gone_at"] is not None for r in ledger), ledger

            # the detached run was not touched: bound detached, never abandoned, still going on its own
            dro = client_row(db, detached)
            assert dro is not None and dro["detach"] == 1 and dro["abandoned_at"] is None, dro
            assert store.get_run(detached)["status"] != "abandoned"
            assert store.list_deployments(run_id=detached, alive_only=True) or store.get_run(detached)["status"] in (
                "completed", "failed"
            )  # fmt: skip
    finally:
        os.environ.pop("WORLDTUNE_RUN_SWEEP_S", None)
        if detached:
            stop_detached(store, detached)


def stop_detached(store: Store, run_id: str) -> None:
    """Stop the detached run's own process (SIGTERM: it tears down, like Ctrl-C) and wait for its teardown."""
    owner = store.get_owner(run_id)
    if owner is not None and owner["released_at"] is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(owner["pid"]), signal.SIGTERM)
    wait_for("the detached run's teardown", lambda: not store.list_deployments(run_id=run_id, alive_only=True), 120)
