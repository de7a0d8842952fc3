"""Rehearsals that differ from the agent's belief, verification in parallel (Send), and the job API the MCP
server uses (tools/runs/tuning_jobs.py over the agent's Tuner): real twin processes, real MCP tools, real SQLite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from worldtune.agent.goal_parser import GoalQuestion
from worldtune.agent.tuner import AgentTuner
from worldtune.policies.calibration import shipped_profile
from worldtune.tools.runs.tuning_jobs import start_tuning, tuning_status
from worldtune.tools.store.database import Store
from worldtune.tools.words.tuning import TuningRequest

pytestmark = pytest.mark.integration

WORLDTUNE = str(Path(sys.executable).parent / "worldtune")


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`worldtune ARGS`; env (when given) replaces $WORLDTUNE_MCP_TOKEN and adds to the rest of the environment."""
    environ = (
        os.environ if env is None else {**{k: v for k, v in os.environ.items() if k != "WORLDTUNE_MCP_TOKEN"}, **env}
    )
    return subprocess.run([WORLDTUNE, *args], capture_output=True, text=True, timeout=400, stdin=subprocess.DEVNULL,
                          env=environ)  # fmt: skip


def test_rehearsal_with_a_slower_twin_learns_and_reports_the_truth(tmp_path: Path) -> None:
    """The twin's H200 has a 1.8x larger fixed cost; the agent only learns it from measurements."""
    shipped = shipped_profile("H200")
    truth = shipped.with_changes(
        vae_decode_s=shipped.vae_decode_s * 1.8, text_encode_s=shipped.text_encode_s * 1.8, source="rehearsal"
    )
    twin_profile = tmp_path / "H200-truth.yaml"
    truth.dump(twin_profile)
    db = tmp_path / "wt.db"
    goal = "fastest on H200, p95 under 150 s, budget $200"
    out = run("tune", goal, "--yes", "--json", "--db", str(db), "--twin-profile", str(twin_profile))
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout)
    # What was measured is the twin's truth, not the belief: the fixed part grew, so latency grew.
    assert data["measured"]["latency_p50_s"] > data["predicted"]["latency_p50_s"] * 1.01
    assert "recalibrated H200" in out.stderr
    assert Store(db).list_deployments(alive_only=True) == []


def test_parallel_verification_uses_several_deployments_at_once(tmp_path: Path) -> None:
    db = tmp_path / "wt.db"
    goal = "cheapest per clip, p95 under 150 s, spot ok, budget $300"
    out = run("tune", goal, "--yes", "--json", "--db", str(db), "--parallel", "2")
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout)
    assert data["recommendation"]["plan"] and data["spend"]["usd"] <= 300
    spans = [(d.created_at, d.terminated_at or time.time()) for d in Store(db).list_deployments()]
    assert len(spans) >= 2
    overlapping = any(a[0] < b[1] and b[0] < a[1] for i, a in enumerate(spans) for b in spans[i + 1 :])
    assert overlapping, spans
    assert Store(db).list_deployments(alive_only=True) == []


def test_start_tuning_returns_at_once_and_get_tuning_follows_it(tmp_path: Path) -> None:
    """The tuning-jobs capability (tools/runs/tuning_jobs.py) over the agent's Tuner, as the MCP tools call it."""
    store, tuner = Store(tmp_path / "wt.db"), AgentTuner()
    request = TuningRequest(infra="local", engine="twin", twin_profile=None, time_scale=300.0, budget_usd=None,
                            max_iterations=30, yes=True, db_path=str(store.path))  # fmt: skip
    with pytest.raises(GoalQuestion):
        start_tuning(store, tuner, "latency under 150 s", request)
    assert store.list_runs() == []  # refused before anything was recorded
    started = time.time()
    run_id = start_tuning(store, tuner, "cheapest per clip, p95 under 150 s, spot ok", request)
    assert time.time() - started < 5
    status = tuning_status(store, tuner, run_id)
    assert status["status"] in ("running", "completed")
    deadline = time.time() + 300
    while status["status"] == "running" and time.time() < deadline:
        time.sleep(0.5)
        status = tuning_status(store, tuner, run_id)
    assert status["status"] == "completed", status
    assert status["summary"]["recommendation"]["plan"]
    assert status["stop_reason"].startswith("converged") and status["measurements"] >= 2
