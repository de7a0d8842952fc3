"""Fault injection (issue 12): tuning runs killed at seeded random points, a killed engine, an MCP client that
disconnects mid-run. After each: `gc` tears down whatever was left, and nothing stays up (no open ledger row,
no deployment recorded alive, no twin process alive by pid and start time); each run, resumed to its end,
repeats no finished measurement and loses no sample (counted in the database).

The scenarios are benchmarks/fault_injection.py's (which prints and saves the counts); the kill points are
"after the k-th database event", never a number of seconds. Marked `faults` and `integration`, so the
README's test command (`-m integration`) runs them; `-m faults` runs only these.
"""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.faults]

SEED = 12
KILLS = 20  # signal faults in the one killed-and-resumed run (with the engine and MCP ones: 22 faults)


def driver() -> Any:
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "fault_injection.py"
    spec = importlib.util.spec_from_file_location("fault_injection", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_clean(faults: list[dict[str, Any]], outcome: dict[str, Any]) -> None:
    for fault in faults:
        assert fault["leaks"] == 0, json.dumps(fault)  # gc found and tore down everything that was left
        if not fault.get("finished_before_the_kill") and fault["scenario"] == "signals":
            assert fault["exit_code"] != 0, fault  # a killed run never reports success
    # converged, or (the twin's timings are noisier on a loaded machine at this time scale) out of budget
    said = json.dumps(outcome, indent=1)  # the whole outcome: stop reason, failed measurements, stderr
    assert outcome["final_exit_code"] in (0, 3) and outcome["final_stop_reason"], said
    assert outcome["completed_benchmarks"] >= 2, said
    assert outcome["repeated"] == 0 and outcome["samples_lost"] == 0 and outcome["counted_twice"] == 0, outcome
    assert outcome["leaks_after_completion"] == 0, outcome


def test_sigkill_sigterm_sigint_at_seeded_random_points(tmp_path: Path) -> None:
    faults, outcome = driver().signal_faults(tmp_path / "signals.db", random.Random(SEED), KILLS)
    assert_clean(faults, outcome)
    killed = [f for f in faults if not f["finished_before_the_kill"]]
    assert len(killed) >= 20, [f["signal"] for f in faults]
    assert {f["signal"] for f in killed} == {"SIGKILL", "SIGTERM", "SIGINT"}
    for fault in killed:  # SIGTERM and SIGINT are handled like Ctrl-C: the run tears down and says so
        if fault["signal"] != "SIGKILL":
            assert fault["run_status"] == "interrupted" and fault["exit_code"] in (130, 143), fault


def test_a_killed_engine_fails_its_measurement_and_the_run_cleans_up(tmp_path: Path) -> None:
    faults, outcome = driver().engine_fault(tmp_path / "engine.db")
    (fault,) = faults
    assert fault["killed_pid"] is not None and fault["left_for_gc"] == 0, fault  # the tune itself tore down
    assert_clean(faults, outcome)


def test_an_mcp_client_that_disconnects_mid_run_leaves_nothing_running(tmp_path: Path) -> None:
    faults, outcome = driver().mcp_disconnect_fault(tmp_path / "mcp.db", random.Random(SEED))
    (fault,) = faults
    # issue 36: the session's end abandons the run (recorded before its driver stops, so a server the client kills
    # while it tears down still says so); `worldtune resume` then takes it over and finishes it
    assert fault["run_status"] == "abandoned", fault
    assert_clean(faults, outcome)


def test_a_detached_run_outlives_its_mcp_session_and_gc_reaps_it_when_killed(tmp_path: Path) -> None:
    faults, outcome = driver().mcp_detach_fault(tmp_path / "detach.db", random.Random(SEED))
    (fault,) = faults
    assert fault["outlived_the_session"], fault  # it measured on after the client and the server were gone
    assert_clean(faults, outcome)
