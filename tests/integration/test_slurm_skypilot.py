"""worldtune on a real SkyPilot cluster (the local Slurm cluster, scripts/slurm-cluster.sh), twin engine, H200:
one launch benchmarked, replanned in place and torn down; one claim over two lanes, each its own cluster.

The SkyPilot side runs in a child process (tests/integration/slurm_driver.py) whose HOME is a private SkyPilot home
made for these tests, so the real ~/.sky is never touched; SKYPILOT_DISABLE_USAGE_COLLECTION=1 is set for it. This
file and test_slurm_recovery_cli.py run on two workers at once, each test's clusters its own (slurm_support.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from slurm_support import drive, slurm_jobs_of

from worldtune.tools.store.database import Store

pytestmark = pytest.mark.integration  # scripts/test.sh runs each file on one worker (--dist loadfile)


def test_launch_benchmark_next_to_the_twin_replan_in_place_and_tear_down(
    slurm_env: dict[str, str], slurm_db: Path
) -> None:
    """One launch of the twin (H200:8), its servers guarded by the deployment's key, a benchmark next to it; then
    (issue 18) the serve job replaced under tp8 on the same cluster (sky.cancel + sky.exec), benchmarked again, and
    torn down. (Issue 35 merged the launch-benchmark-teardown test into this one: one launch asserts both.)"""
    db = slurm_db
    steps = drive(slurm_env, db, "replan", "--time-scale", "100", "--repeats", "3")
    ready = next(s for s in steps if s["step"] == "ready")["deployment"]
    assert ready["state"] == "ready" and ready["cluster"] == f"worldtune-{ready['id']}"
    assert ready["endpoints"][0].startswith("http://127.0.0.1:")
    # issue 15: the launched servers are guarded by the deployment's key; the bench job on the cluster sends it
    guarded = next(s for s in steps if s["step"] == "guarded")
    assert guarded["has_key"] and guarded["none"] == guarded["wrong"] == [401] and guarded["key"] == [200]
    first = next(s for s in steps if s["step"] == "benchmarked")
    store = Store(db)
    samples = store.samples(first["benchmark_id"])
    assert len(samples) == 3 and all(s.ok and s.attempt == 1 for s in samples)
    assert all(s.endpoint.startswith("http://127.0.0.1:") for s in samples)
    bench = store.get_benchmark(first["benchmark_id"])
    assert bench is not None and bench["status"] == "completed" and bench["result"] == first["result"]
    replanned = next(s for s in steps if s["step"] == "replanned")
    after = replanned["deployment"]
    assert after["id"] == ready["id"] and after["cluster"] == ready["cluster"] and after["plan"] == "tp8"
    assert after["previous_plans"] == ["cfg2-u4-hsdp8"] and after["loads"] == 2 and after["state"] == "ready"
    calls = replanned["sky_calls"]
    assert calls.count("launch") == 1 and calls.count("cancel") == 1 and calls[-2:] == ["cancel", "exec"]
    done = [s for s in steps if s["step"] == "benchmarked"]
    assert len(done) == 2 and done[1]["plan"] == "tp8"
    for step in done:
        bench = store.get_benchmark(step["benchmark_id"])
        assert bench is not None and bench["status"] == "completed"
        assert len(store.samples(step["benchmark_id"])) == 3
    down = next(s for s in steps if s["step"] == "down")
    assert down["sky_calls"].count("launch") == 1  # one cluster launched in all
    assert down["ledger_open"] == [] and [r["state"] for r in down["ledger"]] == ["gone"]
    assert slurm_jobs_of(db) == []


def test_one_claim_over_two_lanes_each_its_own_cluster_both_torn_down(
    slurm_env: dict[str, str], slurm_db: Path
) -> None:
    """Issue 25: the claim's full run dealt over two deployments of one plan (two SkyPilot clusters, two Slurm jobs
    on the 8-GPU node), its samples pooled into one measurement, and both clusters torn down."""
    db = slurm_db
    steps = drive(slurm_env, db, "lanes", "--time-scale", "200")
    measured = next(s for s in steps if s["step"] == "measured")
    assert not measured["failed"], measured["error"]
    assert measured["n"] == measured["requested"] == 5 and measured["lanes"] == 2, measured
    deployed = [s for s in steps if s["step"] == "event" and s["kind"] == "deploy"]
    assert len(deployed) == 2
    down = next(s for s in steps if s["step"] == "down")
    clusters = down["clusters"]
    assert len(set(clusters)) == 2 and all(c.startswith("worldtune-") for c in clusters)
    assert down["ledger_open"] == [] and [r["state"] for r in down["ledger"]] == ["gone", "gone"]
    store = Store(db)
    assert store.list_deployments(alive_only=True) == [] and store.ledger(open_only=True) == []
    assert slurm_jobs_of(db) == []
