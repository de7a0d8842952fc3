"""`worldtune calibrate` end to end on the CPU: the micro-benchmarks in two processes (gloo), then the Profile."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from worldtune.tools.words.profile import Profile

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        importlib.util.find_spec("torch") is None, reason="torch is not installed (pip install 'worldtune[calibrate]')"
    ),
]
WORLDTUNE = Path(sys.executable).with_name("worldtune")


def test_calibrate_tiny_on_two_cpu_processes_writes_a_toy_profile_and_its_raw_file(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(WORLDTUNE), "calibrate", "--gpu", "H200", "--tiny", "--device", "cpu", "--world", "2", "--json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)  # progress went to stderr
    written = Path(summary["profile"])
    assert written.parent == tmp_path and written.name.startswith("H200-2gpu-") and written.name.endswith("-toy.yaml")
    profile = Profile.load(written)
    assert profile.source.startswith("TOY RUN") and profile.hardware.startswith("CPU toy run")
    assert profile.a2a_gbps and profile.allreduce_gbps and profile.allgather_gbps  # collectives were measured
    raw = json.loads(written.with_name(written.stem + ".raw.json").read_text())
    assert raw["complete"] and raw["hardware"]["world"] == 2
    assert all(all(check.values()) for check in raw["collective_checks"])  # every collective summed right
    assert not list(tmp_path.glob(".worldtune-calibrate-*"))  # the scratch raw file was moved, not left behind


def test_calibrate_mechanisms_tiny_on_the_cpu_keeps_the_mechbench_beside_the_profile(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(WORLDTUNE), "calibrate", "--gpu", "H200", "--tiny", "--device", "cpu", "--mechanisms", "--json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    written = Path(json.loads(done.stdout)["profile"])
    mech = json.loads(written.with_name(written.stem + ".mech.json").read_text())
    assert mech["complete"] and mech["tiny"]
    sections = {r["section"] for r in mech["records"] if "median_ms" in r}
    assert {"ring", "ulysses_pack", "vae", "sdpa"} <= sections
    assert all(r["merge_rel_err"] < 1e-2 for r in mech["records"] if "merge_rel_err" in r)  # the merge is right
    profile = Profile.load(written)
    basis = profile.basis_of("ring_merge_ms_per_gelem")
    assert basis.kind == "measured" and basis.source.startswith("TOY RUN") and ".mech.json" in basis.source
    assert not list(tmp_path.glob(".worldtune-calibrate-*"))
