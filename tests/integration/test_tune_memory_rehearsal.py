"""A rehearsal whose truth has larger memory terms than the agent believes: the agent notices, it does not hang.

The twin runs out of memory where its own profile says so (the load, for weights and runtime); the agent's
belief (the shipped profile) says every plan fits. Each deployment it tries must come back failed with CUDA's
reason, and the run must end with nothing left running.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from worldtune.policies.calibration import shipped_profile
from worldtune.tools.store.database import Store

pytestmark = pytest.mark.integration

WORLDTUNE = str(Path(sys.executable).parent / "worldtune")


def test_a_truth_with_more_runtime_memory_than_any_gpu_fails_every_deploy_with_the_reason(tmp_path: Path) -> None:
    truth = shipped_profile("H200").with_changes(runtime_gib=150.0, source="rehearsal: 150 GiB of runtime per GPU")
    twin_profile = tmp_path / "H200-truth.yaml"
    truth.dump(twin_profile)
    db = tmp_path / "wt.db"
    goal = "fastest on H200, p95 under 150 s, budget $60"
    out = subprocess.run(
        [WORLDTUNE, "tune", goal, "--yes", "--json", "--db", str(db), "--twin-profile", str(twin_profile)],
        capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert "CUDA out of memory" in out.stderr + out.stdout, out.stderr[-3000:]
    assert "deploy failed" in out.stderr + out.stdout
    deployments = Store(db).list_deployments()
    assert deployments and all(d.state in ("failed", "terminated") for d in deployments)
    assert Store(db).list_deployments(alive_only=True) == []
    if out.returncode == 0:  # a record says there is no verified recommendation
        data = json.loads(out.stdout)
        assert not (data.get("measured") or {}).get("latency_p50_s")
