"""`worldtune estimate` and `worldtune plans` as a user runs them (the installed script)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

WORLDTUNE = str(Path(sys.executable).parent / "worldtune")
REQUIRED = {
    "valid", "reason", "gpu", "plan", "gpus", "steps", "latency_s", "per_step_s", "fixed_s",
    "memory_gib_per_gpu", "clips_per_hour_per_replica", "clips_per_hour_per_node", "usd_per_clip",
}  # fmt: skip


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([WORLDTUNE, *args], capture_output=True, text=True, timeout=60)


def test_estimate_json_has_every_key() -> None:
    out = run("estimate", "--model", "cosmos3-super", "--gpu", "H200", "--plan", "cfg2-u4-hsdp8", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data.keys() >= REQUIRED
    assert data["valid"] and abs(data["latency_s"] - 120.57) / 120.57 < 0.05


def test_invalid_plan_exits_non_zero_with_the_rule() -> None:
    out = run("estimate", "--gpu", "H200", "--plan", "tp8-hsdp8", "--json")
    assert out.returncode == 2
    data = json.loads(out.stdout)
    assert data["valid"] is False and "HSDP" in data["reason"] and data["alternative"]
    human = run("estimate", "--gpu", "H200", "--plan", "tp8-hsdp8")
    assert human.returncode == 2 and "hsdp-exclusive" in human.stderr


def test_unparseable_plan_and_unknown_gpu_are_clear_errors() -> None:
    out = run("estimate", "--plan", "tp8-banana", "--json")
    assert out.returncode == 2 and "banana" in json.loads(out.stdout)["reason"]
    out = run("estimate", "--gpu", "Z100", "--plan", "tp8")
    assert out.returncode == 2 and "H200" in out.stderr


def test_plans_json_lists_valid_and_refused() -> None:
    out = run("plans", "--model", "cosmos3-super", "--gpu", "B200", "--gpus", "8", "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert all(r.keys() >= REQUIRED for r in rows)
    valid = [r for r in rows if r["valid"]]
    assert {"cfg2-u4-hsdp8", "tp8", "8x1gpu"} <= {r["plan"] for r in valid}
    assert any(not r["valid"] and r["reason"] for r in rows)
    assert all(r["gpus"] == 8 for r in rows)


def test_plans_table_for_people() -> None:
    out = run("plans", "--gpu", "H200", "--gpus", "2")
    assert out.returncode == 0 and "cfg2-hsdp2" in out.stdout and "refused" in out.stdout
