"""worldtune on a real SkyPilot cluster: the local Slurm cluster (scripts/slurm-cluster.sh), twin engine, H200.

The CLI's deploy, benchmarked, replanned in place, its Slurm job cancelled mid-benchmark and relaunched, torn down
by the CLI's gc; one claim over two lanes, each its own cluster. The SkyPilot side runs in a child process
(tests/integration/slurm_driver.py) whose HOME is a private SkyPilot home made for these tests, so the real ~/.sky
is never touched; SKYPILOT_DISABLE_USAGE_COLLECTION=1 is set for it. One file on one worker, its tests one after
another (on 2 cores, two Slurm files on two workers at once made the suite slower, not faster: issue 35's note);
the cluster fixture (slurm_support.py) would share the cluster across workers all the same.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from slurm_support import drive, fast_load_profile, run_step, sky_request_logs, slurm_jobs_of

from worldtune.tools.store.database import Store

pytestmark = pytest.mark.integration  # scripts/test.sh runs each file on one worker (--dist loadfile)


def test_cli_deploy_benchmark_replan_in_place_scancel_mid_benchmark_relaunch_then_gc_tears_down(
    slurm_env: dict[str, str], slurm_db: Path
) -> None:
    """`worldtune deploy` launches the twin (2xtp4: two servers, guarded by the deployment's key); another process
    benchmarks next to it, then (issue 18) replaces the serve job under tp8 on the same cluster (sky.cancel +
    sky.exec, no launch) and benchmarks again, with the Slurm job scancel'ed mid-benchmark: the samples measured
    before the cut are kept, the cluster is relaunched and the benchmark completes on attempt 2; `worldtune gc` then
    lists and tears down what the ledger says is up. (Issue 35 merged four tests here: launch-benchmark-teardown,
    replan in place, CLI deploy and gc, scancel mid-benchmark: one launch and its one relaunch assert all four.)"""
    db = slurm_db
    env = {**slurm_env, "WORLDTUNE_DB": str(db)}
    worldtune = str(Path(sys.executable).parent / "worldtune")
    infra = env.get("WORLDTUNE_SLURM_INFRA", "slurm/worldtune-local")
    # Time scale 8: a 4-step clip takes a few seconds, so the scancel lands mid-benchmark (the driver also pauses the
    # twins once 2 samples are in, before squeue and scancel, however loaded the machine is); the fast-load profile
    # loads in ~5 model-s instead of the shipped cold load (~60 s of wall at scale 8, at each of three loads).
    command = [worldtune, "deploy", "--gpu", "H200", "--plan", "2xtp4", "--infra", infra, "--engine", "twin",
               "--time-scale", "8", "--twin-profile", fast_load_profile(), "--yes", "--json"]  # fmt: skip
    up = run_step(command, env, timeout=600)
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:] + sky_request_logs()
    deployment = json.loads(up.stdout)
    assert deployment["state"] == "ready" and deployment["cluster"] == f"worldtune-{deployment['id']}"
    assert len(deployment["endpoints"]) == 2 and all(e.startswith("http://127.0.0.1:") for e in deployment["endpoints"])

    steps = drive(slurm_env, db, "replan", "--time-scale", "8", "--repeats", "3", "--deployment-id", deployment["id"],
                  "--fault")  # fmt: skip
    # issue 15: the launched servers are guarded by the deployment's key; the bench job on the cluster sends it
    guarded = next(s for s in steps if s["step"] == "guarded")
    assert guarded["has_key"] and guarded["none"] == guarded["wrong"] == [401, 401] and guarded["key"] == [200, 200]
    first = next(s for s in steps if s["step"] == "benchmarked")
    store = Store(db)
    samples = store.samples(first["benchmark_id"])
    assert len(samples) == 3 and all(s.ok and s.attempt == 1 for s in samples)
    assert {s.endpoint for s in samples} <= set(deployment["endpoints"])
    bench = store.get_benchmark(first["benchmark_id"])
    assert bench is not None and bench["status"] == "completed" and bench["result"] == first["result"]
    replanned = next(s for s in steps if s["step"] == "replanned")
    after = replanned["deployment"]
    assert after["id"] == deployment["id"] and after["cluster"] == deployment["cluster"] and after["plan"] == "tp8"
    assert after["previous_plans"] == ["2xtp4"] and after["loads"] == 2 and after["state"] == "ready"
    assert len(after["endpoints"]) == 1
    calls = replanned["sky_calls"]  # the bench job, then the serve job replaced: the cluster stays, no launch
    assert "launch" not in calls and calls.count("cancel") == 1 and calls[-2:] == ["cancel", "exec"]

    # the tp8 benchmark, cut by scancel: what attempt 1 measured is kept (marked), attempt 2 runs on the relaunch
    cancel = next(s for s in steps if s["step"] == "scancel")
    assert cancel["jobs"] and cancel["samples_at_cancel"] >= 2 and cancel["paused_twins"] >= 1
    done = [s for s in steps if s["step"] == "benchmarked"]
    assert len(done) == 2 and done[1]["plan"] == "tp8"
    cut = store.samples(done[1]["benchmark_id"])
    before = [s for s in cut if s.attempt == 1]
    again = [s for s in cut if s.attempt == 2]
    assert len(before) >= cancel["samples_at_cancel"] and all(s.interrupted for s in before)
    answered = sum(1 for s in before if s.ok and s.phase == "full")  # kept as evidence: attempt 2 asks the rest
    assert len([s for s in again if s.phase == "full"]) == max(1, 6 - answered) and all(s.ok for s in again)
    assert [s.seq for s in cut] == sorted({s.seq for s in cut})  # nothing overwritten
    tp8 = store.get_benchmark(done[1]["benchmark_id"])
    assert tp8 is not None and tp8["status"] == "completed" and "completed on attempt 2" in tp8.get("message", "")
    down_calls = next(s for s in steps if s["step"] == "down")["sky_calls"]
    assert down_calls.count("launch") == 1 and down_calls.index("launch") > len(calls)  # the relaunch, after the cut

    listed = subprocess.run([worldtune, "gc", "--json"], capture_output=True, text=True, timeout=120, env=env)
    assert [r["cluster"] for r in json.loads(listed.stdout)["would_tear_down"]] == [deployment["cluster"]]
    gone = subprocess.run([worldtune, "gc", "--yes", "--json"], capture_output=True, text=True, timeout=300, env=env)
    assert gone.returncode == 0, gone.stderr[-3000:]
    assert [r["result"] for r in json.loads(gone.stdout)["torn_down"]] == ["down"]
    assert store.ledger(open_only=True) == [] and {r["state"] for r in store.ledger()} == {"gone"}
    stored = store.get_deployment(deployment["id"])
    assert stored is not None and stored.state == "terminated"
    assert slurm_jobs_of(db) == []


def test_one_claim_over_two_lanes_each_its_own_cluster_both_torn_down(
    slurm_env: dict[str, str], slurm_db: Path
) -> None:
    """Issue 25: the claim's full run dealt over two deployments of one plan (two SkyPilot clusters, two Slurm jobs
    on the 8-GPU node), its samples pooled into one measurement, and both clusters torn down."""
    db = slurm_db
    # time scale 1000: a 1gpu clip (~820 model-s) takes under a second of wall time; the lanes' bench jobs dominate
    steps = drive(slurm_env, db, "lanes", "--time-scale", "1000")
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


def test_cli_deploys_the_real_vllm_omni_on_slurm_over_two_ranks_benchmarks_and_tears_it_down(
    slurm_env: dict[str, str], slurm_db: Path
) -> None:
    """Issue 55: `worldtune deploy --engine vllm-omni` through SkyPilot on the local Slurm cluster: the rendered task
    runs the real `vllm serve` (engine venv: scripts/engine-setup.sh) of the tiny Cosmos3 checkpoint under plan cfg2
    (2 ranks; the test-only CPU platform stands in for the GPUs, through --server-env), guarded by the key; `worldtune
    bench` measures it; `worldtune gc` tears it down and nothing of it keeps running."""
    import psutil
    from real_engine import CPU_PLATFORM_DIR, KEY, engine_bin, tiny_cosmos3

    db = slurm_db
    checkpoint = tiny_cosmos3()
    env = {**slurm_env, "WORLDTUNE_DB": str(db), "WORLDTUNE_API_KEY": KEY}
    worldtune = str(Path(sys.executable).parent / "worldtune")
    infra = env.get("WORLDTUNE_SLURM_INFRA", "slurm/worldtune-local")
    server_env = {"PATH": f"{engine_bin('vllm').parent}:/usr/local/bin:/usr/bin:/bin",
                  "PYTHONPATH": str(CPU_PLATFORM_DIR), "WORLDTUNE_CPU_RANKS": "2", "HF_HUB_OFFLINE": "1",
                  "TRANSFORMERS_OFFLINE": "1",
                  "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "OMP_NUM_THREADS": "1"}  # fmt: skip
    command = [worldtune, "deploy", "--gpu", "H200", "--plan", "cfg2", "--model", "cosmos3-nano", "--infra", infra,
               "--engine", "vllm-omni", "--install", "host", "--model-path", str(checkpoint),
               *(a for k, v in server_env.items() for a in ("--server-env", f"{k}={v}")),
               "--yes", "--json"]  # fmt: skip
    up = run_step(command, env, timeout=900)
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:] + sky_request_logs()
    deployment = json.loads(up.stdout)
    assert deployment["state"] == "ready" and deployment["engine"] == "vllm-omni" and not deployment["guardrails"]
    (endpoint,) = deployment["endpoints"]
    assert endpoint.startswith("http://127.0.0.1:")

    bench = run_step([worldtune, "bench", "--endpoint", endpoint, "--model", "cosmos3-nano", "--size", "256x256",
                      "--frames", "5", "--steps", "3", "--repeats", "2", "--probe-steps", "2", "--warmup", "1",
                      "--db", str(db), "--json"], env, timeout=600)  # fmt: skip
    assert bench.returncode == 0, bench.stdout[-3000:] + bench.stderr[-3000:]
    result = json.loads(bench.stdout)
    assert (result["completed_requests"], result["failed_requests"]) == (2, 0)
    assert result["served_model"] == str(checkpoint)  # the real server, serving the checkpoint on the node
    assert "Cosmos3OmniDiffusersPipeline.diffuse" in result["stage_durations_mean"]
    port = int(endpoint.rsplit(":", 1)[1])
    serving = [
        c.pid for c in psutil.net_connections("tcp") if c.laddr and c.laddr.port == port and c.status == "LISTEN"
    ]
    assert serving, "nothing listens on the endpoint"

    gone = subprocess.run([worldtune, "gc", "--yes", "--json"], capture_output=True, text=True, timeout=300, env=env)
    assert gone.returncode == 0, gone.stderr[-3000:]
    assert [r["result"] for r in json.loads(gone.stdout)["torn_down"]] == ["down"]
    store = Store(db)
    stored = store.get_deployment(deployment["id"])
    assert stored is not None and stored.state == "terminated" and store.ledger(open_only=True) == []
    assert slurm_jobs_of(db) == []
    left = [p for p in serving if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert left == [], f"the real server still runs after the teardown: {left}"
