"""`worldtune tune` end to end on the embedded default (local twin): real MCP tools, real twin processes,
real SQLite checkpoints; approval and resume in a new process; a run killed mid-way and resumed; the budget."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from worldtune.tools.store.database import Store

pytestmark = pytest.mark.integration

WORLDTUNE = str(Path(sys.executable).parent / "worldtune")
GOAL = "Cosmos3-Super, 720p 189-frame clips, p95 under 150 s, cheapest per clip, H200 or B200, spot ok, budget $300"
KEYS = {"goal", "recommendation", "measured", "predicted", "spend", "stop_reason"}
FIGURES = {"latency_p50_s", "latency_p95_s", "clips_per_hour_per_node", "usd_per_clip"}


def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([WORLDTUNE, *args], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def nothing_left_running(db: Path) -> None:
    """No deployment alive, no ledger entry open, no twin process of the run still there."""
    store = Store(db)
    assert store.list_deployments(alive_only=True) == []
    assert store.ledger(open_only=True) == []
    for entry in store.ledger():
        for pid in json.loads(entry["detail"] or "{}").get("pids", []) if entry["detail"].startswith("{") else []:
            assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()


def benchmark_rows(db: Path) -> list[dict[str, Any]]:
    return Store(db).list_benchmarks(limit=10000)


def test_tune_on_the_twin_ends_with_a_verified_recommendation(tmp_path: Path) -> None:
    db = tmp_path / "wt.db"
    out = run("tune", GOAL, "--yes", "--json", "--db", str(db))
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout)
    assert data.keys() >= KEYS
    rec = data["recommendation"]
    assert {"gpu", "plan", "replicas", "capacity", "offer"} <= rec.keys() and rec["gpu"] in ("H200", "B200")
    assert rec["capacity"] in ("on-demand", "spot")
    assert data["measured"].keys() >= FIGURES and data["predicted"].keys() >= FIGURES
    assert data["measured"]["latency_p95_s"] <= 150  # verified against the goal, not only predicted
    assert data["spend"].keys() >= {"gpu_hours", "usd", "deployments", "benchmarks"}
    assert 0 < data["spend"]["usd"] <= 300 and data["spend"]["benchmarks"] >= 2
    assert data["stop_reason"].startswith("converged")
    assert data["goal"]["latency_bound_s"] == 150
    nothing_left_running(db)

    report = run("report", data["run_id"], "--db", str(db), "--out", str(tmp_path / "report"), "--json")
    assert report.returncode == 0, report.stderr[-3000:]
    written = json.loads(report.stdout)
    for key in ("html", "json", "latency_vs_throughput_png", "cost_per_clip_png"):
        assert Path(written[key]).stat().st_size > 1000, key
    html = Path(written["html"]).read_text()
    assert rec["plan"] in html and "Pareto" in html
    assert (
        "sky" in Path(written["skypilot_yaml"]).read_text() or "resources" in Path(written["skypilot_yaml"]).read_text()
    )

    # The same goal again with every core of the machine busy (issue 35 item 4): modelled time comes from the model,
    # so the decisions, the figures and the answer are the same as on the quieter machine above. The test makes the
    # load itself (a CPU-bound process per core) unless the machine already runs more than two per core (inside
    # the full suite on 2 cores it does, and burners there would only slow every other test).
    cores = os.cpu_count() or 2
    already_busy = os.getloadavg()[0] > 2 * cores
    burners = [] if already_busy else [
        multiprocessing.get_context("spawn").Process(target=_burn, daemon=True) for _ in range(cores)
    ]  # fmt: skip
    for burner in burners:
        burner.start()
    try:
        busy = run("tune", GOAL, "--yes", "--json", "--db", str(tmp_path / "busy.db"))
    finally:
        for burner in burners:
            burner.kill()
    assert busy.returncode == 0, busy.stderr[-3000:]
    again = json.loads(busy.stdout)
    # the same lines: a round's verifications run at once (the first probe and the rival probed beside it on a node
    # the claim starts anyway: Action.rides), so the order their lines interleave in follows the machine, not the run
    assert sorted(decisions(busy.stderr)) == sorted(decisions(out.stderr))
    assert again["spend"] == data["spend"] and again["recommendation"] == data["recommendation"]
    assert again["stop_reason"] == data["stop_reason"] and again["measured"] == data["measured"]


def _burn() -> None:
    while True:
        pass


def decisions(progress: str) -> list[str]:
    """The run's progress lines (every decision with its reasons, every measurement and what it cost, every
    recalibration), with the ids that differ from run to run masked."""
    return [re.sub(r"wt-[0-9a-f]{8}|tune-\d+-\d+-[0-9a-f]+", "ID", line) for line in progress.splitlines()]


def test_ambiguous_goal_asks_and_starts_nothing(tmp_path: Path) -> None:
    db = tmp_path / "wt.db"
    out = run("tune", "latency under 150 s, cheapest", "--yes", "--json", "--db", str(db))
    assert out.returncode == 2
    data = json.loads(out.stdout)
    assert any("percentile" in q for q in data["questions"])
    assert not db.exists() or Store(db).list_deployments() == []


def test_a_deadline_buys_lanes_shown_before_approval_and_declining_starts_nothing(tmp_path: Path) -> None:
    db = tmp_path / "wt.db"
    first = run("tune", GOAL + ", answer within 6 hours", "--ask", "--json", "--db", str(db))
    waiting = json.loads(first.stdout)
    est = waiting["question"]["spend_estimate"]
    assert est["parallel"] >= 2 and "dollars for time" in est["parallel_why"], est
    assert est["answer_hours"] <= 6 and est["deployments"] >= est["parallel"]
    assert Store(db).list_deployments() == []  # shown before anything starts
    # declined: the run stops and starts nothing (issue 35 merged the declined-spend test here)
    declined = run("resume", waiting["thread_id"], "--no", "--json", "--db", str(db))
    assert declined.returncode == 3 and Store(db).list_deployments() == []
    assert json.loads(declined.stdout)["stop_reason"].startswith("declined")


def test_approval_resumed_in_a_new_process_then_killed_mid_run_resumes_without_repeating_measurements(
    tmp_path: Path,
) -> None:
    """The run stops at its spend approval (nothing started); another process approves it and is killed once the
    first measurement is stored; a third resumes it to the end without measuring anything twice. (Issue 35 merged
    the approval test and the kill test here: the approved run is the one killed, so one run asserts both.)"""
    db = tmp_path / "wt.db"
    first = run("tune", GOAL, "--ask", "--json", "--db", str(db))
    assert first.returncode == 3, first.stderr[-3000:]
    waiting = json.loads(first.stdout)
    assert waiting["status"] == "waiting_for_approval"
    assert waiting["question"]["spend_estimate"]["usd"] > 0
    assert Store(db).list_deployments() == []  # nothing is started before approval
    child = subprocess.Popen(
        [WORLDTUNE, "resume", waiting["thread_id"], "--yes", "--json", "--db", str(db)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.time() + 240
    try:
        while time.time() < deadline:  # kill it once the first measurement is stored
            if db.exists() and any(r["status"] == "completed" for r in benchmark_rows(db)):
                break
            assert child.poll() is None, child.stderr.read() if child.stderr else ""
            time.sleep(0.2)
        else:
            pytest.fail("no measurement finished in time")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    before = {r["id"] for r in benchmark_rows(db) if r["status"] == "completed"}
    run_id = Store(db).list_runs(1)[0]["id"]

    resumed = run("resume", run_id, "--json", "--db", str(db))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    data = json.loads(resumed.stdout)
    assert data["status"] == "completed" and data["recommendation"]["plan"]
    assert data["stop_reason"].startswith("converged")
    rows = benchmark_rows(db)
    assert before <= {r["id"] for r in rows}
    # Every (deployment, plan, kind) was measured to completion once: nothing finished was run again (a held node
    # replanned to the next candidate measures another plan on the same deployment).
    done = [(r["deployment_id"], r["config"].get("plan"), bool(r["config"].get("probe_steps")))
            for r in rows if r["status"] == "completed"]  # fmt: skip
    assert len(done) == len(set(done))
    nothing_left_running(db)


def test_budget_is_never_exceeded(tmp_path: Path) -> None:
    db = tmp_path / "wt.db"
    out = run("tune", GOAL, "--yes", "--json", "--db", str(db), "--budget", "9")
    data = json.loads(out.stdout)
    assert data["spend"]["usd"] <= 9
    assert data["stop_reason"].startswith(("budget", "converged"))
    if data["stop_reason"].startswith("budget"):
        assert out.returncode in (0, 3)
    nothing_left_running(db)


def test_ctrl_c_tears_everything_down(tmp_path: Path) -> None:
    """SIGINT once a deployment is ready: the tune tears down, records the run interrupted and exits 130.

    It once exited 0 on a loaded machine: the cancellation Ctrl-C sends was swallowed on its way through
    the MCP client and the run went on to finish. The stop is now kept as a reason the driver checks after
    every step (and delivered again until noticed), so a signalled run can never end as a success.
    """
    db = tmp_path / "wt.db"
    child = subprocess.Popen(
        [WORLDTUNE, "tune", GOAL, "--yes", "--db", str(db)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    deadline = time.monotonic() + 300
    # wait for the event (a deployment recorded ready), or for the tune ending without one (a failure)
    while not (db.exists() and any(d.state == "ready" for d in Store(db).list_deployments())):
        assert child.poll() is None, f"the tune ended before any deployment was ready: {child.communicate()[1]}"
        assert time.monotonic() < deadline, "no deployment became ready"
        time.sleep(0.05)
    child.send_signal(signal.SIGINT)
    _, stderr = child.communicate(timeout=300)
    assert child.returncode == 130, stderr[-3000:]
    assert "stopped" in stderr and "worldtune resume" in stderr
    nothing_left_running(db)
    assert Store(db).list_runs(1)[0]["status"] == "interrupted"


def test_tune_a_non_anchor_workload_measures_that_workload(tmp_path: Path) -> None:
    """480p 121-frame clips: the search predicts them and every benchmark sends them (not the 720p anchor)."""
    db = tmp_path / "wt.db"
    goal = "Cosmos3-Super 480p 121-frame clips, p95 under 60 s, cheapest per clip, H200, budget $100"
    out = run("tune", goal, "--yes", "--json", "--db", str(db))
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout)
    workload = data["goal"]["workload"]
    assert (workload["width"], workload["height"], workload["num_frames"]) == (832, 480, 121)
    assert data["stop_reason"].startswith("converged") and data["recommendation"]["gpu"] == "H200"
    # verified against the goal, not only predicted: by order statistics when the budget allowed 90 samples,
    # else by the named parametric bound (the record then says the p95 is not claimable on its own)
    m = data["measured"]
    assert (m["latency_p95_s"] if m["latency_p95_s"] is not None else m["p95_upper_95conf_normal"]) <= 60
    assert 0 < data["spend"]["usd"] <= 100
    rows = [r for r in benchmark_rows(db) if r["status"] == "completed"]
    assert rows and all(r["config"]["workload"] == workload for r in rows)
    for row in rows:  # the twin answered 480p 121-frame clips, as the benchmark decoded them
        ok = [s for s in Store(db).samples(row["id"]) if s.ok]
        shapes = {(s.video_frames, s.video_width, s.video_height) for s in ok}
        assert shapes == {(121, 832, 480)}, (row["id"], shapes)
    nothing_left_running(db)
