"""worldtune on a real SkyPilot cluster (the local Slurm cluster, scripts/slurm-cluster.sh), twin engine, H200:8:
a Slurm job cancelled mid-benchmark, and the CLI's deploy and gc.

The SkyPilot side runs in a child process (tests/integration/slurm_driver.py) whose HOME is a private SkyPilot home
made for these tests, so the real ~/.sky is never touched; SKYPILOT_DISABLE_USAGE_COLLECTION=1 is set for it. This
file and test_slurm_skypilot.py run on two workers at once, each test's clusters its own (slurm_support.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from slurm_support import drive, run_step, sky_request_logs, slurm_jobs_of

from worldtune.tools.store.database import Store

pytestmark = pytest.mark.integration  # scripts/test.sh runs each file on one worker (--dist loadfile)


def test_scancel_mid_benchmark_keeps_samples_relaunches_and_completes(
    slurm_env: dict[str, str], slurm_db: Path
) -> None:
    db = slurm_db
    # Time scale 8: a 4-step clip takes ~3.3 s, so the 14 clips after the cut point leave ~45 s for squeue +
    # scancel to land even on a loaded machine (at 25 they left ~14 s, and a loaded run finished first).
    # --fast-load: the twins load in ~5 model-s instead of the profile's cold load (~60 s of wall at scale 8, twice)
    steps = drive(slurm_env, db, "fault", "--time-scale", "8", "--repeats", "16", "--fast-load")
    cancel = next(s for s in steps if s["step"] == "scancel")
    assert cancel["jobs"] and cancel["samples_at_cancel"] >= 2
    done = next(s for s in steps if s["step"] == "benchmarked")
    store = Store(db)
    samples = store.samples(done["benchmark_id"])
    first = [s for s in samples if s.attempt == 1]
    second = [s for s in samples if s.attempt == 2]
    assert len(first) >= cancel["samples_at_cancel"] and all(s.interrupted for s in first)
    assert len(second) == 16 and all(s.ok for s in second)
    assert [s.seq for s in samples] == sorted({s.seq for s in samples})  # nothing overwritten
    assert "completed on attempt 2" in (store.get_benchmark(done["benchmark_id"]) or {}).get("message", "")
    down = next(s for s in steps if s["step"] == "down")
    assert down["ledger_open"] == [] and {r["state"] for r in down["ledger"]} == {"gone"}
    assert slurm_jobs_of(db) == []


def test_cli_deploy_then_gc_tears_down_what_the_ledger_says_is_up(slurm_env: dict[str, str], slurm_db: Path) -> None:
    env = {**slurm_env, "WORLDTUNE_DB": str(slurm_db)}
    worldtune = str(Path(sys.executable).parent / "worldtune")
    infra = env.get("WORLDTUNE_SLURM_INFRA", "slurm/worldtune-local")
    command = [worldtune, "deploy", "--gpu", "H200", "--plan", "2xtp4", "--infra", infra, "--engine", "twin",
               "--time-scale", "100", "--yes", "--json"]  # fmt: skip
    up = run_step(command, env, timeout=600)
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:] + sky_request_logs()
    deployment = json.loads(up.stdout)
    assert deployment["state"] == "ready" and len(deployment["endpoints"]) == 2
    listed = subprocess.run([worldtune, "gc", "--json"], capture_output=True, text=True, timeout=120, env=env)
    assert [r["cluster"] for r in json.loads(listed.stdout)["would_tear_down"]] == [deployment["cluster"]]
    gone = subprocess.run([worldtune, "gc", "--yes", "--json"], capture_output=True, text=True, timeout=300, env=env)
    assert gone.returncode == 0, gone.stderr[-3000:]
    assert [r["result"] for r in json.loads(gone.stdout)["torn_down"]] == ["down"]
    store = Store(env["WORLDTUNE_DB"])
    assert store.ledger(open_only=True) == []
    stored = store.get_deployment(deployment["id"])
    assert stored is not None and stored.state == "terminated"
    assert slurm_jobs_of(slurm_db) == []
