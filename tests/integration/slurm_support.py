"""The local Slurm cluster of the Slurm tests (test_slurm_skypilot.py), shareable by pytest workers.

scripts/test.sh runs the Slurm file on one worker (on 2 cores, two Slurm files on two workers at once made the
suite slower: issue 35), but the fixture stays safe when several workers use the cluster (WORLDTUNE_SLURM_GPUS=16
fits two 8-GPU clusters at once): the first worker to need it brings it up (under a file lock, so `up` never runs
twice at once), each worker registers its pid, and the last one out stops the private SkyPilot API server, the SSH
ControlMasters started since the first one came in, and the cluster if none of them found it up (scripts/test.sh
brings it up and down itself). A test cancels only the Slurm jobs of the clusters its own database recorded:
another worker's jobs are its own.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from worldtune.tools.store.database import Store

REPO = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("slurm_driver.py")
SKY_HOME = REPO / ".cache" / "sky-home-tests"
API_PORT = "46592"
GPUS = "8"  # scripts/test.sh brings the cluster up with the same count: another count would restart Slurm
USERS = REPO / ".cache" / "slurm-tests-users.json"
LOCK = REPO / ".cache" / "slurm-tests.lock"


def script(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(REPO / "scripts" / "slurm-cluster.sh"), *args], capture_output=True,
                          text=True, timeout=900, env=env)  # fmt: skip


def base_env() -> dict[str, str]:
    # A launch that hangs is cancelled and torn down by worldtune itself after 7 minutes (a local launch takes
    # about one), so a hang fails with SkyPilot's last words well inside the tests' own timeouts.
    return {**os.environ, "WORLDTUNE_SKY_HOME": str(SKY_HOME), "WORLDTUNE_SKY_API_PORT": API_PORT,
            "WORLDTUNE_SLURM_GPUS": GPUS, "SKYPILOT_DISABLE_USAGE_COLLECTION": "1",
            "WORLDTUNE_SKY_LAUNCH_TIMEOUT_S": "420"}  # fmt: skip


@contextlib.contextmanager
def _locked() -> Iterator[dict[str, Any]]:
    """The users' file, read and written under an exclusive lock; pids no longer alive are dropped."""
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    with LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            state: dict[str, Any] = json.loads(USERS.read_text()) if USERS.exists() else {}
        except ValueError:
            state = {}
        state["pids"] = [pid for pid in state.get("pids", []) if _alive(pid)]
        yield state
        if state["pids"]:
            USERS.write_text(json.dumps(state))
        else:
            USERS.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def cluster_in_use() -> Iterator[dict[str, str]]:
    """The cluster up for this process, and the environment of a SkyPilot client with the tests' private home."""
    base = base_env()
    with _locked() as state:
        if not state["pids"]:
            state["was_up"] = "slurmctld              up" in script("status", env=base).stdout
            state["masters_before"] = sorted(control_masters())
        up = script("up", env=base)
        assert up.returncode == 0, up.stderr[-3000:]
        state["pids"].append(os.getpid())
    env = {**base, **json.loads(script("env", "--json", env=base).stdout)}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"  # `sky` of this venv for `sky api stop`
    try:
        yield env
    finally:
        with _locked() as state:
            state["pids"] = [pid for pid in state["pids"] if pid != os.getpid()]
            if not state["pids"]:
                left = worldtune_slurm_jobs()  # every test cancelled its own: any job left is a leak, named
                for job in left:
                    subprocess.run(["scancel", job], capture_output=True)
                stop_api_server(env, set(state.get("masters_before", [])))
                if not state.get("was_up", True):
                    script("down", env=base)
                assert not left, f"worldtune Slurm jobs left after the last Slurm test: {left}"


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
    """`sky api stop` under the private home, then end the ControlMasters started since, by pid."""
    subprocess.run([str(Path(sys.executable).parent / "sky"), "api", "stop"], env=env, capture_output=True,
                   timeout=120)  # fmt: skip
    for pid in control_masters() - masters_before:
        with contextlib.suppress(ProcessLookupError):
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


def slurm_jobs_of(db: Path) -> list[str]:
    """The Slurm jobs of the clusters that `db`'s ledger recorded (SkyPilot names a job `<cluster>-<user hash>`)."""
    if not db.exists():
        return []
    clusters = {str(row["cluster"]) for row in Store(db).ledger() if row.get("cluster")}
    return [job for job, name in _squeue() if any(name == c or name.startswith(f"{c}-") for c in clusters)]


def worldtune_slurm_jobs() -> list[str]:
    return [job for job, name in _squeue() if name.startswith("worldtune-")]


def _squeue() -> list[tuple[str, str]]:
    """Every Slurm job on the cluster: (job id, job name)."""
    listing = subprocess.run(["squeue", "-h", "-o", "%i %j"], capture_output=True, text=True).stdout
    return [(job, name) for job, name in (line.split(maxsplit=1) for line in listing.splitlines() if line.strip())]


def fast_load_profile() -> str:
    """The shipped H200 profile with a load of ~10 model seconds, for a run at a low time scale whose subject is not
    the load (the scancel test: at time scale 8 the shipped cold load took ~60 s of wall time, twice). Written in
    the repository's .cache, which the cluster's job user can read (a pytest tmp_path is private to root)."""
    from worldtune.policies.calibration import shipped_profile

    fast = shipped_profile("H200").model_copy(update={
        "load_base_s": 5.0, "load_gib_per_s_warm": 1000.0, "load_gib_per_s_cold": 1000.0, "guardrail_startup_s": 0.0,
        "source": "tests/integration/slurm_driver.py: the shipped H200 profile with a ~5 s load (test only)",
    })  # fmt: skip
    path = REPO / ".cache" / "slurm-fast-load-H200.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(fast.model_dump(mode="json"), sort_keys=False))
    path.chmod(0o644)
    return str(path)
