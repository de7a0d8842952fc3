"""Issue 36.5: sizes a real user never reaches are refused in the words every caller goes through, before anything
starts: budgets, hours, request counts and list lengths."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from worldtune.agent.configuration import TuneOptions
from worldtune.tools.plans.spend import check_hold_hours
from worldtune.tools.words.bench_spec import BenchmarkSpec
from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.goal import Goal
from worldtune.tools.words.limits import MAX_BUDGET_USD, MAX_PLANNED_REQUESTS

URL = ["http://127.0.0.1:8000"]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"repeats": 1001}, "repeats"),
        ({"concurrency": [1] * 100_000}, "concurrency"),
        ({"probe_steps": [4] * 50_000}, "probe_steps"),
        ({"poisson_rate_per_hour": 60, "poisson_requests": 10**8}, "poisson_requests"),
        ({"concurrency": [64] * 32, "repeats": 100}, "planned requests"),
    ],
)
def test_a_benchmark_past_a_ceiling_is_refused_naming_the_field(changes: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as refused:
        BenchmarkSpec(endpoints=URL, **changes)  # type: ignore[arg-type]
    assert field in str(refused.value)


def test_the_largest_claim_the_agent_makes_is_within_the_ceiling() -> None:
    claim = BenchmarkSpec(endpoints=URL * 8, repeats=459, concurrency=[8], probe_steps=[])  # p99 at 99%, 8 lanes
    assert claim.planned_requests <= MAX_PLANNED_REQUESTS


def test_budgets_and_hours_have_ceilings_for_every_caller() -> None:
    with pytest.raises(ValidationError, match="budget_usd"):
        Goal(budget_usd=1e12)
    with pytest.raises(ValidationError, match="budget_usd"):
        TuneOptions(budget_usd=MAX_BUDGET_USD * 10)
    assert Goal(budget_usd=MAX_BUDGET_USD).budget_usd == MAX_BUDGET_USD
    for hours in (-1, float("inf"), 721, float("nan")):
        with pytest.raises(InvalidInput, match="hours"):
            check_hold_hours(hours)
    assert check_hold_hours(720) == 720


@pytest.mark.parametrize("hours", ["-1", "1e400", "721"])
def test_a_dry_run_refuses_the_hours_the_real_deploy_refuses(tmp_path: Path, hours: str) -> None:
    worldtune = str(Path(sys.executable).parent / "worldtune")
    out = subprocess.run([worldtune, "deploy", "--gpu", "H200", "--plan", "tp8", "--dry-run", f"--hours={hours}"],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)  # fmt: skip
    assert out.returncode == 2 and "hours=" in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_a_dry_run_on_your_own_gpus_asks_the_price_the_real_deploy_asks(tmp_path: Path) -> None:
    worldtune = str(Path(sys.executable).parent / "worldtune")
    base = [worldtune, "deploy", "--gpu", "H200", "--plan", "tp8", "--infra", "slurm/x", "--dry-run"]
    unpriced = subprocess.run(base, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert unpriced.returncode == 2 and "usd_per_hour" in unpriced.stderr, unpriced.stderr  # was: "$0.00/h", exit 0
    priced = subprocess.run([*base, "--usd-per-hour", "30"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert priced.returncode == 0, priced.stderr


def test_a_dry_run_applies_the_guardrails_and_creates_no_database(tmp_path: Path) -> None:
    import os

    worldtune = str(Path(sys.executable).parent / "worldtune")
    env = {**os.environ, "WORLDTUNE_DB": str(tmp_path / "wt.db"), "WORLDTUNE_SKY_HOME": str(tmp_path / "sky")}
    command = [worldtune, "deploy", "--gpu", "H200", "--plan", "tp8", "--infra", "nebius", "--hours", "10", "--dry-run"]
    long = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert long.returncode == 2 and "max_hours_per_action" in long.stderr, long.stderr  # as the launch refuses it
    assert not (tmp_path / "wt.db").exists()
