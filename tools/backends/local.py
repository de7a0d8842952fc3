"""LocalBackend: hosts a deployment as twin-engine processes on this machine (infra "local").

One `worldtune twin` process per replica of the plan, each on a free loopback port, all in one
process group so teardown stops them together. The cluster is written to the Store's ledger before
anything starts, each process's pid and start time right after it starts (so `gc` can always find it
and never signals a stranger that reuses its pid), and the cluster is marked gone after teardown;
launch and teardown are safe to call twice. A twin started for a tuning run watches the process that
started it and exits when that process is gone, whatever killed it. Only the twin runs here:
vLLM-Omni needs GPUs this machine does not have.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from worldtune.policies import perf_model
from worldtune.tools.plans.estimate import resolve_profile
from worldtune.tools.store import owners
from worldtune.tools.store.database import Store
from worldtune.tools.words.deployment import (
    BenchmarksFromHere,
    Deployment,
    Handle,
    Progress,
    replan_target,
    replanned,
    stable_seed,
)
from worldtune.tools.words.errors import InvalidInput, WorldtuneError
from worldtune.tools.words.models import get_model
from worldtune.tools.words.profile import Profile
from worldtune.tools.words.vllm_omni import PINNED

HOST = "127.0.0.1"
STOP_GRACE_S = 5.0
KILL_WAIT_S = 30.0  # how long a teardown waits for the kernel to take a SIGKILLed process down (bounded, not timed)
PROGRESS_EVERY_S = 2.0  # progress while loading, even unchanged

# Processes this process started (pid -> Popen), so it can reap them; another process finds them by pgid.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}
_HEALTH: Any = None  # one httpx.Client for every /health check of this process (health_code)
_HEALTH_LOCK = threading.Lock()


def health_code(url: str) -> int:
    """The status of GET url/health on a loopback twin, through one client for the whole process. A bare
    httpx.get builds a new client and with it a TLS context (the CA bundle read and parsed, ~10-20 ms of CPU)
    each time; polled ten times a second while twins load, that was over half of a tuning run's CPU (issue 35,
    benchmarks/profile_main_job.py). No connection is kept: each check is a fresh connection, as before."""
    global _HEALTH
    import httpx

    with _HEALTH_LOCK:
        if _HEALTH is None:
            _HEALTH = httpx.Client(timeout=2.0, limits=httpx.Limits(max_keepalive_connections=0))
    return int(_HEALTH.get(f"{url}/health").status_code)


def preemption_s(deployment: Deployment, profile: Profile) -> float | None:
    """When a spot twin's node is taken back, in model seconds after its load (issue 39 item 6): an exponential draw
    at the profile's spot_preemptions_per_node_hour, seeded by the deployment's noise and its load count (a node
    started again draws again); None on demand or at a rate of 0."""
    rate = profile.spot_preemptions_per_node_hour
    if deployment.capacity != "spot" or rate <= 0:
        return None
    draw = random.Random(stable_seed(deployment.replica_seed(0), "preempt", deployment.loads))
    return draw.expovariate(rate / 3600.0)


def _preempted(deployment: Deployment) -> bool:
    """Its processes are gone at or after the moment its spot node was to be taken back."""
    at = deployment.handle.preempt_at
    return at is not None and time.time() >= at - 1.0


class DeploymentFailed(WorldtuneError):
    """A deployment did not come up; the message says why (with the engine's last log lines)."""


def cluster_name(deployment: Deployment) -> str:
    return f"local-{deployment.id}"


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (what connect() and bind(0) draw from)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = HOST, count: int = 1) -> int:
    """The first of `count` consecutive ports that are free right now, chosen below the ephemeral range.

    A port from bind(0) is an ephemeral one, which every outgoing connection on the machine also draws from:
    between this check and the server's own bind, a connection elsewhere can take it (EADDRINUSE, seen in CI
    with three test workers). Below that range only listeners bind, and a random start keeps two callers'
    picks apart.
    """
    high = _ephemeral_low() - count
    low = max(1024, high - 16384)
    rng = random.SystemRandom()
    for _ in range(256):
        first = rng.randint(low, high) if high > low else low
        if all(_bindable(host, first + i) for i in range(count)):
            return first
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:  # a crowded range: let the kernel choose
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _state_of(pid: int) -> str | None:
    """The kernel's state letter of a process (Z for a zombie), None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def _alive(pid: int) -> bool:
    child = _CHILDREN.get(pid)
    if child is not None:
        return child.poll() is None
    state = _state_of(pid)
    return state is not None and state != "Z"


def _wait_gone(pids: list[int], seconds: float) -> None:
    """Until none of `pids` is alive (gone, or a zombie), at most `seconds`."""
    deadline = time.monotonic() + seconds
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.02)


def _is_our_twin(pid: int) -> bool:
    """Never signal a stranger: a recycled pid would not be running `worldtune ... twin`."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(b"worldtune" in a for a in argv) and b"twin" in argv


class LocalBackend(BenchmarksFromHere):
    """Runs the twin engine as local processes; the Backend for infra 'local'."""

    name = "local"
    status_fresh_s = 0.0  # a process check: always asked

    def __init__(self, store: Store, log_dir: Path | None = None, ready_timeout_s: float | None = None) -> None:
        self.store = store
        self.log_dir = log_dir or store.path.parent / "logs"
        self.ready_timeout_s = ready_timeout_s

    # ---- launch ------------------------------------------------------------------------------------
    def launch(self, deployment: Deployment, progress: Progress | None = None) -> Deployment:
        """Start one twin per replica, wait until every /health answers 200, return the ready deployment."""
        if deployment.engine != "twin":
            raise InvalidInput(
                "engine",
                deployment.engine,
                "twin on infra local (this machine has no GPU)",
                "use infra slurm/NAME, kubernetes or a cloud for vllm-omni",
            )
        if deployment.state in ("loading", "ready") and self._pids(deployment):
            current = self.status(deployment)
            if current.state in ("loading", "ready"):
                return self._wait_ready(current, progress) if current.state == "loading" else current
        cluster = cluster_name(deployment)
        self.store.ledger_launch(cluster, self.name, deployment.id, deployment.run_id)
        return self._start(deployment.model_copy(update={"loads": 0}), cluster, progress)

    def replan(self, deployment: Deployment, plan: str, progress: Progress | None = None) -> Deployment:
        """Stop the twin processes and start them again under `plan` on the same GPUs: a warm load.

        The ledger row, the owner and the deployment id stay; a plan larger than the node is refused first.
        """
        new = replan_target(deployment, plan)
        cluster = deployment.cluster or cluster_name(deployment)
        if not self.store.ledger_open(cluster):
            raise InvalidInput("deployment_id", deployment.id, "a deployment whose cluster is still up", cluster)
        pgid, processes = self._processes(deployment)
        self._kill(pgid, processes)
        target = replanned(deployment, new)
        self.store.save_deployment(target)
        self.store.ledger_update(cluster, "replanning", json.dumps({"from": str(deployment.plan), "to": str(new)}))
        if progress:
            progress(f"stopped {deployment.plan}; restarting {deployment.id} as {new} (warm load)", 0.05)
        return self._start(target, cluster, progress)

    def _start(
        self, deployment: Deployment, cluster: str, progress: Progress | None, cold: bool | None = None
    ) -> Deployment:
        """One twin per replica of the deployment's plan on its (already ledgered) cluster, then wait for ready.

        The first start on the node is a cold load (weights from disk); later starts (replan) are warm.
        """
        plan = deployment.plan
        profile = self._profile(deployment)
        cold = deployment.loads == 0 if cold is None else cold
        preempt_s = preemption_s(deployment, profile)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        ports, pids, starts, pgid = [], [], [], 0
        # a run's twins die with the process that runs it (the run's cleanup or gc tears down the rest)
        _, me, my_start = owners.this_process()
        exit_with = ["--exit-with", f"{me}:{my_start}"] if deployment.run_id and my_start else []
        try:
            for i in range(plan.replicas):
                if not self.store.ledger_open(cluster):  # torn down meanwhile (a run's cleanup, gc): stop here
                    break
                port = free_port()
                log = open(self.log_dir / f"{deployment.id}-r{i}.log", "ab")  # noqa: SIM115 (the child keeps it)
                cmd = [
                    sys.executable,
                    "-m",
                    "worldtune.cli",
                    "twin",
                    "--host",
                    HOST,
                    "--port",
                    str(port),
                    "--gpu",
                    deployment.gpu,
                    "--plan",
                    str(plan.single_replica()),
                    "--model",
                    deployment.model,
                    "--time-scale",
                    repr(deployment.time_scale),
                    "--seed",
                    str(deployment.replica_seed(i)),
                    PINNED.stage_profiler,
                    "--cold-load" if cold else "--warm-load",
                ]
                if deployment.twin_profile:
                    cmd += ["--profile", deployment.twin_profile]
                cmd += PINNED.guardrail_flags(deployment.guardrails)  # as the rendered server's
                if preempt_s is not None:  # the node's replicas go together, at the drawn moment
                    cmd += ["--preempt-after", repr(preempt_s)]
                cmd += exit_with
                # one process group (in our session: setpgid cannot cross sessions) so teardown stops all at once
                group: dict[str, Any] = {"process_group": pgid}
                child = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, **group)
                log.close()
                _CHILDREN[child.pid] = child
                pgid = pgid or child.pid
                ports.append(port)
                pids.append(child.pid)
                starts.append(owners.start_time(child.pid))
                # recorded before the next one starts: a kill right here still leaves gc every pid
                spawned = Handle(pgid=pgid, pids=pids, starts=starts, ports=ports)
                self.store.ledger_update(cluster, "launching", spawned.model_dump_json(exclude_none=True))
        except OSError as exc:
            self._kill(pgid, pids)
            self.store.ledger_gone(cluster, f"spawn failed: {exc}")
            raise DeploymentFailed(f"could not start the twin: {exc}") from exc
        # preempt_at: not before then, on the wall clock (the twin counts from its load: status() tells it from a
        # failure by this)
        at = None if preempt_s is None else time.time() + preempt_s / deployment.time_scale
        handle = Handle(pgid=pgid, pids=pids, starts=starts, ports=ports, profile=profile.source, preempt_at=at)
        if not self.store.ledger_open(cluster):  # a teardown won the race with this launch: it stays down
            self._kill(pgid, handle.processes())
            self.store.save_deployment(
                deployment.model_copy(update={"state": "terminated", "handle": handle, "terminated_at": time.time()})
            )
            raise DeploymentFailed(f"deployment {deployment.id} was torn down while it was starting")
        self.store.ledger_update(cluster, "running", handle.model_dump_json(exclude_none=True))
        current = deployment.model_copy(
            update={
                "state": "loading",
                "cluster": cluster,
                "endpoints": [f"http://{HOST}:{p}" for p in ports],
                "handle": handle,
                "detail": f"{len(pids)} twin process(es) started",
                "loads": deployment.loads + 1,
            }
        )
        self.store.save_deployment(current)
        if progress:
            progress(f"started {len(pids)} twin process(es) on ports {', '.join(map(str, ports))}", 0.1)
        return self._wait_ready(current, progress, profile, cold)

    def _profile(self, deployment: Deployment) -> Profile:
        if deployment.twin_profile:
            return Profile.load(deployment.twin_profile)
        return resolve_profile(deployment.gpu)

    def _wait_ready(
        self, deployment: Deployment, progress: Progress | None, profile: Profile | None = None, cold: bool = True
    ) -> Deployment:
        import httpx

        profile = profile or self._profile(deployment)
        # the twin loads for the profile's load time of this plan (+ guardrail start-up when it runs them) divided by
        # its time scale
        plan = deployment.plan
        guard = profile.guardrail_startup_s if deployment.guardrails else 0.0
        load_s = perf_model.load_time_s(get_model(deployment.model), profile, cold, plan) + guard
        timeout = self.ready_timeout_s or (2.0 * load_s / deployment.time_scale + 60.0)
        deadline = time.monotonic() + timeout
        pending = list(deployment.endpoints)
        reported, reported_at = -1, time.monotonic()
        while pending:
            dead = [pid for pid in self._pids(deployment) if not _alive(pid)]
            if dead:
                tail = self._log_tail(deployment)
                self.teardown(deployment)
                why = "its spot node was preempted (rehearsed)" if _preempted(deployment) else "exited"
                self._fail(deployment, f"twin process {dead[0]} {why} while loading: {tail}")
            for url in list(pending):
                # a loading server refuses connections (vLLM-Omni listens only once loaded); 503 means a dead engine
                with contextlib.suppress(httpx.HTTPError):
                    code = health_code(url)
                    if code == 200:
                        pending.remove(url)
                    elif code == 503:
                        tail = self._log_tail(deployment)
                        self.teardown(deployment)
                        self._fail(deployment, f"{url}/health is 503 (the engine is dead): {tail}")
            if not pending:
                break
            if time.monotonic() > deadline:
                self.teardown(deployment)
                self._fail(deployment, f"not healthy within {timeout:.0f} s: {', '.join(pending)}")
            done = len(deployment.endpoints) - len(pending)
            # also every few seconds while nothing changes: a caller that went away learns it here
            if progress and (done != reported or time.monotonic() - reported_at >= PROGRESS_EVERY_S):
                reported, reported_at = done, time.monotonic()
                total = len(deployment.endpoints)
                progress(f"loading: {done}/{total} replicas healthy", 0.1 + 0.8 * done / total)
            time.sleep(0.1)
        ready = deployment.model_copy(update={"state": "ready", "ready_at": time.time(), "modelled_load_s": load_s})
        self.store.save_deployment(ready)
        if ready.cluster:
            self.store.ledger_update(ready.cluster, "ready", ready.handle.model_dump_json(exclude_none=True))
        if progress:
            progress(f"{ready.id} ready at {', '.join(ready.endpoints)}", 1.0)
        return ready

    def _fail(self, deployment: Deployment, reason: str) -> None:
        current = self.store.get_deployment(deployment.id) or deployment
        failed = current.model_copy(update={"state": "failed", "detail": reason[-2000:]})
        self.store.save_deployment(failed)
        raise DeploymentFailed(f"deployment {deployment.id} failed: {reason}")

    def _log_tail(self, deployment: Deployment, lines: int = 8) -> str:
        texts = []
        for path in sorted(self.log_dir.glob(f"{deployment.id}-r*.log")):
            with contextlib.suppress(OSError):
                texts.append(" | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:]))
        return " || ".join(t for t in texts if t) or "(no log output)"

    # ---- status ------------------------------------------------------------------------------------
    @staticmethod
    def _pids(deployment: Deployment) -> list[int]:
        return list(deployment.handle.pids)

    def _processes(self, deployment: Deployment) -> tuple[int, dict[int, int | None]]:
        """(pgid, pid -> start time) from the deployment and from its ledger row (written first, per process)."""
        cluster = deployment.cluster or cluster_name(deployment)
        found, pgid = deployment.handle.processes(), deployment.handle.pgid
        for row in self.store.ledger():
            recorded = Handle.from_record(row["detail"]) if row["cluster"] == cluster else None
            if recorded is None:
                continue
            pgid = pgid or recorded.pgid
            for pid, start in recorded.processes().items():
                found.setdefault(pid, start)
        return pgid, found

    def status(self, deployment: Deployment) -> Deployment:
        """Ready when every replica answers /health 200; failed when a process is gone or an engine is dead (503)."""
        import httpx

        if not deployment.alive:
            return deployment
        pids = self._pids(deployment)
        if not pids or not all(_alive(pid) for pid in pids):
            # a replica is gone (killed, or it exited with its owner): stop the rest, the cluster is over
            pgid, processes = self._processes(deployment)
            self._kill(pgid, processes)
            cluster = deployment.cluster or cluster_name(deployment)
            preempted = _preempted(deployment)
            if any(row["cluster"] == cluster for row in self.store.ledger(open_only=True)):
                why = "spot node preempted (rehearsed)" if preempted else "a replica process is gone"
                self.store.ledger_gone(cluster, why)
            # the handle keeps the pids teardown needs
            current = deployment.model_copy(update={"state": "preempted" if preempted else "failed"})
            return self._saved_if_alive(current)
        codes: list[int] = []
        for url in deployment.endpoints:
            try:
                codes.append(health_code(url))
            except httpx.TimeoutException:  # listening but no answer in time (a busy machine): nothing learned
                return deployment
            except httpx.HTTPError:  # refused: still loading (it listens once loaded)
                pass
        if 503 in codes:  # vLLM-Omni's /health is 503 only when the engine is dead
            return self._saved_if_alive(deployment.model_copy(update={"state": "failed"}))
        state = "ready" if codes.count(200) == len(deployment.endpoints) else "loading"
        if state != deployment.state:
            return self._saved_if_alive(deployment.model_copy(update={"state": state}))
        return deployment

    def _saved_if_alive(self, current: Deployment) -> Deployment:
        """What a status check found, saved only over a record still alive: a teardown that came in between
        (gc, the lease sweep) stays as it recorded, and is what the caller gets."""
        self.store.save_deployment(current, if_alive=True)
        return self.store.get_deployment(current.id) or current

    # ---- recovery and benchmarks -------------------------------------------------------------------
    def recover(self, deployment: Deployment, progress: Progress | None = None) -> Deployment:
        """Start the twins again on this machine (what is left of them stopped first): same id, plan and owner; as a
        cloud's relaunch after a preemption, a new node: a cold load, and noise of its own."""
        pgid, processes = self._processes(deployment)
        self._kill(pgid, processes)
        cluster = deployment.cluster or cluster_name(deployment)
        self.store.ledger_launch(cluster, self.name, deployment.id, deployment.run_id)
        # the relaunched node's noise is its own (issue 39 item 1): a node taken back and started again does not
        # replay the latencies its predecessor drew
        seed = stable_seed(deployment.replica_seed(0), "relaunch", deployment.loads)
        fresh: dict[str, object] = {"state": "pending", "endpoints": [], "ready_at": None, "noise_seed": seed}
        again = deployment.model_copy(update=fresh)
        return self._start(again, cluster, progress, cold=True)  # a new node: its weights come from disk

    # ---- teardown ----------------------------------------------------------------------------------
    def teardown(self, deployment: Deployment) -> Deployment:
        """Stop the process group (TERM, then KILL after a grace period), mark the ledger gone; idempotent."""
        pgid, processes = self._processes(deployment)
        self._kill(pgid, processes)
        cluster = deployment.cluster or cluster_name(deployment)
        if any(row["cluster"] == cluster for row in self.store.ledger(open_only=True)):
            self.store.ledger_gone(cluster, "torn down")
        if deployment.state == "terminated":
            return deployment
        state = "failed" if deployment.state == "failed" else "terminated"
        current = deployment.model_copy(update={"state": state, "terminated_at": time.time()})
        self.store.save_deployment(current)
        return current

    def _kill(self, pgid: int, processes: dict[int, int | None] | list[int]) -> None:
        # a child we hold cannot have its pid recycled (we have not reaped it); others must be the very
        # process started (same start time) and show our command line
        starts = processes if isinstance(processes, dict) else dict.fromkeys(processes)
        pids = list(starts)
        ours = [
            pid
            for pid in pids
            if _alive(pid) and (pid in _CHILDREN or (owners.process_alive(pid, starts[pid]) and _is_our_twin(pid)))
        ]
        if pgid and ours:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGTERM)
        _wait_gone(ours, STOP_GRACE_S)
        for pid in ours:
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        # a SIGKILL is delivered, not done: the process lives on while the kernel takes it down (longer on a busy
        # machine), so a teardown returns once its processes are gone (or zombies), not when the signal is sent
        _wait_gone(ours, KILL_WAIT_S)
        for pid in pids:
            child = _CHILDREN.pop(pid, None)
            if child is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.wait(timeout=STOP_GRACE_S)
