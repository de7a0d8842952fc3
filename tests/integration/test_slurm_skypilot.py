"""worldtune on a real SkyPilot cluster: the local Slurm cluster (scripts/slurm-cluster.sh), twin engine, H200:8.

The SkyPilot side runs in a child process (tests/integration/slurm_driver.py) whose HOME is a private
SkyPilot home made for these tests, so the real ~/.sky is never touched; SKYPILOT_DISABLE_USAGE_COLLECTION=1
is set for it. At the end the private API server is stopped and its SSH ControlMaster ended by pid.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from worldtune.tools.store.database import Store

pytestmark = pytest.mark.integration  # scripts/test.sh runs each file on one worker (--dist loadfile)

REPO = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("slurm_driver.py")
SKY_HOME = REPO / ".cache" / "sky-home-tests"
API_PORT = "46592"


def _script(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(REPO / "scripts" / "slurm-cluster.sh"), *args], capture_output=True,
                          text=True, timeout=900, env=env)  # fmt: skip


@pytest.fixture(scope="module")
def slurm_env() -> Iterator[dict[str, str]]:
    """The local Slurm cluster up, and the environment of a SkyPilot client with the tests' private home."""
    if os.geteuid() != 0:
        pytest.skip("the local Slurm cluster needs root (Debian packages, munge, slurmd)")
    # A launch that hangs is cancelled and torn down by worldtune itself after 7 minutes (a local launch takes
    # about one), so a hang fails with SkyPilot's last words well inside the tests' own timeouts.
    base = {**os.environ, "WORLDTUNE_SKY_HOME": str(SKY_HOME), "WORLDTUNE_SKY_API_PORT": API_PORT,
            "SKYPILOT_DISABLE_USAGE_COLLECTION": "1", "WORLDTUNE_SKY_LAUNCH_TIMEOUT_S": "420"}  # fmt: skip
    was_up = "slurmctld              up" in _script("status", env=base).stdout
    masters_before = control_masters()
    up = _script("up", env=base)
    assert up.returncode == 0, up.stderr[-3000:]
    env = {**base, **json.loads(_script("env", "--json", env=base).stdout)}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"  # `sky` of this venv for `sky api stop`
    yield env
    stop_api_server(env, masters_before)
    if not was_up:
        _script("down", env=base)


def control_masters() -> set[int]:
    """SkyPilot's SSH ControlMaster processes (ssh renames itself to `ssh: /tmp/sky_ssh_<hash>/... [mux]`)."""
    found = set()
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and (proc / "comm").read_text().strip() == "ssh":
                cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
                if "/sky_ssh_" in cmdline and "[mux]" in cmdline:
                    found.add(int(proc.name))
        except OSError:
            continue
    return found


def stop_api_server(env: dict[str, str], masters_before: set[int]) -> None:
    """`sky api stop` under the private home, then end the ControlMasters this session started, by pid."""
    subprocess.run([str(Path(sys.executable).parent / "sky"), "api", "stop"], env=env, capture_output=True,
                   timeout=120)  # fmt: skip
    for pid in control_masters() - masters_before:
        os.kill(pid, signal.SIGTERM)


def sky_request_logs(limit: int = 3, chars: int = 1500) -> str:
    """The tails of the private API server's latest request logs: what SkyPilot was doing when a step failed."""
    logs = sorted((SKY_HOME / ".sky" / "api_server" / "request_logs").glob("*.log"), key=lambda p: p.stat().st_mtime)
    return "".join(f"\n--- {p.name}\n{p.read_text(errors='replace')[-chars:]}" for p in logs[-limit:])


def run_step(command: list[str], env: dict[str, str], timeout: int) -> subprocess.CompletedProcess[str]:
    """Run a step; past its timeout, fail with what it had printed and SkyPilot's request logs, not a bare timeout."""
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO)
    except subprocess.TimeoutExpired as exc:
        printed = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        pytest.fail(f"{command[1:3]} still running after {timeout} s:\n{printed[-3000:]}{sky_request_logs()}")


def drive(env: dict[str, str], db: Path, *args: str) -> list[dict[str, Any]]:
    out = run_step([sys.executable, str(DRIVER), *args, "--db", str(db)], env, timeout=900)
    steps = [json.loads(line[7:]) for line in out.stdout.splitlines() if line.startswith("DRIVER ")]
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:] + sky_request_logs()
    return steps


def worldtune_slurm_jobs() -> list[str]:
    listing = subprocess.run(["squeue", "-h", "-o", "%i %j"], capture_output=True, text=True).stdout
    return [job for job, name in (line.split() for line in listing.splitlines()) if name.startswith("worldtune-")]


def no_worldtune_slurm_jobs() -> bool:
    return not worldtune_slurm_jobs()


@pytest.fixture(autouse=True)
def free_the_node(slurm_env: dict[str, str]) -> Iterator[None]:
    """After each test, cancel any worldtune allocation it left (that test has failed already): the node has 8
    GPUs and every test asks for all of them, so one leftover would keep the next test's launch pending."""
    yield
    for job in worldtune_slurm_jobs():
        subprocess.run(["scancel", job], capture_output=True)


def test_scancel_mid_benchmark_keeps_samples_relaunches_and_completes(
    slurm_env: dict[str, str], tmp_path: Path
) -> None:
    db = tmp_path / "wt.db"
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
    assert no_worldtune_slurm_jobs()


def test_launch_benchmark_next_to_the_twin_replan_in_place_and_tear_down(
    slurm_env: dict[str, str], tmp_path: Path
) -> None:
    """One launch of the twin (H200:8), its servers guarded by the deployment's key, a benchmark next to it; then
    (issue 18) the serve job replaced under tp8 on the same cluster (sky.cancel + sky.exec), benchmarked again, and
    torn down. (Issue 35 merged the launch-benchmark-teardown test into this one: one launch asserts both.)"""
    db = tmp_path / "wt.db"
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
    assert no_worldtune_slurm_jobs()


def test_cli_deploy_then_gc_tears_down_what_the_ledger_says_is_up(slurm_env: dict[str, str], tmp_path: Path) -> None:
    env = {**slurm_env, "WORLDTUNE_DB": str(tmp_path / "wt.db")}
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
    assert no_worldtune_slurm_jobs()


def test_one_claim_over_two_lanes_each_its_own_cluster_both_torn_down(
    slurm_env: dict[str, str], tmp_path: Path
) -> None:
    """Issue 25: the claim's full run dealt over two deployments of one plan (two SkyPilot clusters, two Slurm jobs
    on the 8-GPU node), its samples pooled into one measurement, and both clusters torn down."""
    db = tmp_path / "wt.db"
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
    assert no_worldtune_slurm_jobs()
