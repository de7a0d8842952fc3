"""Four CPU processes over gloo: every parallel plan of the generator step gives the one-process answer, and the
micro-benchmark's collectives run correctly inside concurrent sub-groups (what an 8-GPU node will run)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed"),
]

REPO = Path(__file__).resolve().parents[2]
PLANS = "cfg2,u2,tp2,cfg2-hsdp2,hsdp2,cfg2-u2,u4,tp4,cfg2-tp2,cfg2-u2-hsdp4,u2-hsdp2"
EXPECTED_KINDS = {
    "cfg2": {"cfg_allgather"},
    "u4": {"ulysses_a2a", "sp_allgather"},
    "tp4": {"tp_allreduce"},
    "tp2-cfg2": {"tp_allreduce", "cfg_allgather"},
    "cfg2-u2-hsdp4": {"ulysses_a2a", "sp_allgather", "cfg_allgather", "hsdp_allgather"},
    "hsdp2": {"hsdp_allgather"},
}


def _run(argv: list[str]) -> None:
    done = subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def test_every_plan_matches_one_process_on_four_gloo_ranks(tmp_path: Path) -> None:
    out = tmp_path / "raw.json"
    _run(["benchmarks/generator_step.py", "--world", "4", "--tiny", "--device", "cpu", "--plans", PLANS,
          "--layers", "2", "--check", "--reps", "1", "--out", str(out)])  # fmt: skip
    raw = json.loads(out.read_text())
    assert raw["complete"] and raw["hardware"]["world"] == 4
    entries = {e["plan"]: e for e in raw["plans"]}
    assert len(entries) == len(PLANS.split(","))
    for name, entry in entries.items():
        assert entry["check_rel_err"] < 1e-5, name  # float32: only the order of the sums differs
        assert entry["output_finite"], name
        assert len(entry["ranks"]) == entry["world"]
    for name, kinds in EXPECTED_KINDS.items():
        assert set(entries[name]["comm"]) == kinds, name
    # Ulysses: two all-to-alls per layer per branch; groups of the plan's degree
    u4 = entries["u4"]["comm"]["ulysses_a2a"]
    assert u4["calls_per_step"] == 2 * 2 * 2 and u4["group_size"] == 4
    assert entries["tp4"]["comm"]["tp_allreduce"]["calls_per_step"] == 2 * 2 * 2
    assert entries["cfg2-u2-hsdp4"]["comm"]["hsdp_allgather"]["calls_per_step"] == 2  # one branch per rank


def test_microbench_collectives_in_concurrent_sub_groups(tmp_path: Path) -> None:
    out = tmp_path / "mb.json"
    _run(["policies/instruments/microbench.py", "--world", "4", "--groups", "2,4", "--skip-compute", "--tiny",
          "--device", "cpu", "--repeats", "1", "--iters", "1", "--out", str(out)])  # fmt: skip
    raw = json.loads(out.read_text())
    assert raw["complete"] and raw["collectives"]
    blocks = {b["group_size"]: b for b in raw["collectives_groups"]}
    assert blocks[2]["groups"] == [[0, 1], [2, 3]] and blocks[4]["groups"] == [[0, 1, 2, 3]]
    for block in blocks.values():
        # the sums and gathers are of the group's own ranks: a wrong group would give other values
        assert all(all(check.values()) for check in block["checks"]) and len(block["checks"]) == 4
        assert all(case["world"] == block["group_size"] for case in block["cases"])
    names2 = {c["name"] for c in blocks[2]["cases"]}
    assert "a2a-u2-qkv" in names2 and "a2a-u4-qkv" not in names2
    assert "a2a-u4-qkv" in {c["name"] for c in blocks[4]["cases"]}
