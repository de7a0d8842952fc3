"""SkyPilotBackend: launch, watch, benchmark next to the server, and tear down a Deployment through SkyPilot's SDK.

Every SDK call returns a request id that is resolved here (`sky.get`, or `sky.stream_and_get` for
launch, whose log becomes progress). Every rendered task passes SkyPilot's own validation first.
Clusters are named `worldtune-<deployment id>` and written to the ledger before launch and marked
gone after `down`. As a safety net the cluster is launched with `down=True` and an idle timeout, so
SkyPilot tears it down by itself once nothing runs on it (the server job ends when a server dies).

Readiness is read from the serve job's log (the run script prints one marker per replica after its
own `GET /v1/models` succeeded), so it works without open ports. Benchmarks run on the cluster as a
`sky exec` job (sky/bench_job.py) against the server on loopback; its log carries every sample,
which is copied into the local Store as it appears. When the cluster disappears under a benchmark
(a spot preemption; on Slurm, `scancel`), the samples already copied stay, the deployment is
relaunched and the benchmark runs again to completion on the new cluster. SkyPilot's managed-job
recovery is not used: its preemption check contacts public addresses (see PLATFORM.md).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from worldtune.sky import bench_remote, home, serve_job
from worldtune.sky.dryrun import validate_task
from worldtune.sky.launch import (
    LAUNCH_TIMEOUT_ENV,
    LaunchError,
    RequestTimeout,
    field_of,
    hard_down_minutes,
    launch_timeout_s,
)
from worldtune.sky.local_cluster import cluster_python
from worldtune.sky.render import (
    ALL_READY_MARKER,
    FAILED_MARKER,
    HF_TOKEN,
    RenderOptions,
    cluster_name,
    cold_load_s,
    render_task,
    replica_slices,
    startup_allowance_s,
)
from worldtune.tools.words.bench_spec import BenchmarkSpec
from worldtune.tools.words.deployment import (
    API_KEY_ENV,
    Deployment,
    MeasureHere,
    Progress,
    Records,
    benchmark_with_recovery,
)
from worldtune.tools.words.result import BenchmarkResult

AUTODOWN_IDLE_MINUTES = 10
BASE_PORT_ENV = "WORLDTUNE_SKY_BASE_PORT"
# how often a launch waiting on loopback servers (local Slurm) also reads the serve job's log and status: each is a
# SkyPilot request that runs a Python (importing sky) on the cluster, ~1.5 s of CPU (issue 35's profile), and blocks
# the wait for 5-11 s on 2 cores while the servers may already answer; the servers' own answer says ready, so the
# job is read only to see a failed start (a FAILED marker, an ended job) at most this late
REMOTE_CHECK_EVERY_S = 30.0
# how long a deployment's status stays good for `get_deployment` (an agent asks every ENGINE_CHECK_S, 2 s): each ask
# is a forced status refresh plus a job query, seconds of SkyPilot requests and ~3 s of CPU; a benchmark that lost
# its cluster finds out from its own log stream and asks afresh (bench_remote), so the agent's check can lag
STATUS_FRESH_S = 15.0


def _free_port_range(count: int, key: str, start: int = 18000, stop: int = 30000) -> int:
    """The first port of `count` consecutive free loopback ports (Slurm here shares this machine's ports).

    The search starts at a place of its own for each deployment (`key`, its id), not at `start`: two deployments
    launched at once probe before either binds, and from one start they would both take the same ports."""
    bases = list(range(start, stop - count + 1, 10))
    first = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=4).digest(), "big") % len(bases)
    for base in bases[first:] + bases[:first]:
        ok = True
        for port in range(base, base + count):
            with socket.socket() as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    probe.bind(("127.0.0.1", port))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise LaunchError(f"no {count} consecutive free ports between {start} and {stop}")


def render_options_for(deployment: Deployment) -> RenderOptions:
    """Render options per infra: on Slurm the servers bind loopback on free ports and run this venv's worldtune."""
    if deployment.infra.kind == "slurm":
        base = os.environ.get(BASE_PORT_ENV)
        port = int(base) if base else _free_port_range(deployment.plan.replicas, deployment.id)
        worldtune = f"{cluster_python()} -m worldtune.cli"
        return RenderOptions(host="127.0.0.1", base_port=port, worldtune=worldtune, open_ports=False)
    # Elsewhere this checkout travels as the workdir, so the benchmark client runs next to the server.
    return RenderOptions(ship_worldtune=True, worldtune="~/.worldtune-venv/bin/worldtune")


class SkyPilotBackend:
    """The Backend for `slurm/<cluster>` and SkyPilot clouds."""

    name = "skypilot"
    status_fresh_s = STATUS_FRESH_S

    def __init__(
        self,
        store: Records,
        options: RenderOptions | None = None,
        poll_s: float = 2.0,
        autodown: bool = True,
        predicted: Callable[[Deployment, RenderOptions], RenderOptions] | None = None,
    ) -> None:
        self.store = store
        self.options = options
        self.predicted = predicted  # fills the model's numbers in (tools/deploy_preview.render_options)
        self.poll_s = poll_s
        self.autodown = autodown
        self.sky = home.import_skypilot(home.chosen_home(dry_run=False))
        self.serve_jobs: dict[str, int] = {}

    def with_secrets(self, deployment: Deployment, config: dict[str, Any]) -> dict[str, Any]:
        """The task config with its secrets' values inline, in memory only (SkyPilot redacts them in its logs).

        The rendered YAML names them with no value (`sky launch --secret NAME=value` fills them); SkyPilot reads
        such a name as a managed-secret reference that `Task.update_secrets` does not clear, so a launch from
        Python must carry the values in the config itself. HF_TOKEN goes only when set; the API key always."""
        secrets: dict[str, str] = {API_KEY_ENV: self.api_key(deployment)}  # the twin's servers are guarded too
        token = os.environ.get(HF_TOKEN)
        if deployment.engine == "vllm-omni" and token:
            secrets[HF_TOKEN] = token
        return {**config, "secrets": secrets}

    def api_key(self, deployment: Deployment) -> str:
        """The API key of a deployment's servers (sky/api_key.py); never printed or logged."""
        from worldtune.sky.api_key import deployment_api_key

        return deployment_api_key(self.store.path, deployment)

    # ---- SDK helpers ------------------------------------------------------------------------------
    def result(self, request_id: Any) -> Any:
        return self.sky.get(request_id)

    def result_within(self, request_id: Any, timeout_s: float, what: str) -> Any:
        """`sky.get` with a deadline: past it the request is cancelled on the API server and RequestTimeout raised."""
        box: dict[str, Any] = {}
        done = threading.Event()

        def wait() -> None:
            try:
                box["value"] = self.sky.get(request_id)
            except BaseException as exc:  # handed to the caller below
                box["error"] = exc
            finally:
                done.set()

        threading.Thread(target=wait, name=f"sky-get-{what}", daemon=True).start()
        if not done.wait(timeout_s):
            # The server may be the thing that hangs; the caller tears the cluster down either way.
            with contextlib.suppress(Exception):
                self.sky.api_cancel(request_id, silent=True)
            raise RequestTimeout(
                f"{what}: SkyPilot request {request_id} did not finish within {timeout_s:.0f} s and was cancelled"
                f" (its log: `sky api logs {request_id}`; the allowance is ${LAUNCH_TIMEOUT_ENV})"
            )
        if "error" in box:
            raise box["error"]
        return box["value"]

    def options_for(self, deployment: Deployment) -> RenderOptions:
        """The render options for `deployment` (the infra's unless given), with the model's numbers filled in."""
        options = self.options or render_options_for(deployment)
        return self.predicted(deployment, options) if self.predicted else options

    def allowance_s(self, deployment: Deployment) -> int:
        """The start-up allowance of `deployment`'s servers: from the given options' cold load, else the model's."""
        given = self.options.cold_load_s if self.options else None
        if given is None and self.predicted is not None:
            given = self.predicted(deployment, RenderOptions()).cold_load_s
        return startup_allowance_s(deployment, cold_load_s(given))

    def job_log(self, cluster: str, job_id: int) -> str:
        import io

        buffer = io.StringIO()
        try:
            self.sky.tail_logs(cluster, job_id, follow=False, output_stream=buffer)
        except Exception as exc:  # the cluster may be gone: the caller checks status next
            return buffer.getvalue() + f"\n(log unavailable: {exc})"
        return buffer.getvalue()

    def job_status(self, cluster: str, job_id: int) -> str | None:
        try:
            found = self.result(self.sky.job_status(cluster, [job_id]))
        except Exception:  # cluster not up / gone
            return None
        status = found.get(job_id) if isinstance(found, dict) else None
        return status.value if status is not None else None

    def autodown_arguments(self, deployment: Deployment) -> dict[str, Any]:
        """sky.launch's autodown: a hard `down` at the end of the hours paid for, else the idle safety net.

        The idle timeout alone never fires while the serve job runs (SkyPilot counts a running job as
        activity), so a deployment with `hold_hours` is launched with wait_for=NONE: SkyPilot downs it
        `minutes` after the timer last started, whatever runs. The timer starts when autostop is set at
        launch and restarts whenever a job is submitted (the serve job, each benchmark job), so the bound
        is hold_hours + the load allowance after the last job submitted, not after the launch.
        """
        if not self.autodown:
            return {"down": False, "idle_minutes_to_autostop": None}
        if deployment.hold_hours is None:
            return {"down": True, "idle_minutes_to_autostop": AUTODOWN_IDLE_MINUTES}
        from sky.skylet.autostop_lib import AutostopWaitFor

        return {
            "down": True,
            "idle_minutes_to_autostop": hard_down_minutes(deployment, self.allowance_s(deployment)),
            "wait_for": AutostopWaitFor.NONE,
        }

    # ---- the Backend protocol ---------------------------------------------------------------------
    def launch(self, deployment: Deployment, progress: Progress | None = None) -> Deployment:
        say: Progress = progress or (lambda message, fraction: None)
        allowance = launch_timeout_s()  # a bad setting is refused before anything is recorded or launched
        options = self.options_for(deployment)
        config = render_task(deployment, options)
        validate_task(config)
        # Two steps: launch provisions and runs setup; the servers then start as a job of their own. On
        # Slurm a job step takes the CPUs its task asks for (by default all of the allocation), so the
        # serve job asks for all but two, leaving room for the benchmark job next to it.
        provision = validate_task(self.with_secrets(deployment, {k: v for k, v in config.items() if k != "run"}))
        cluster = cluster_name(deployment)
        self.store.ledger_launch(cluster, self.name, deployment.id, deployment.run_id)
        dep = deployment.model_copy(update={"cluster": cluster, "state": "provisioning", "detail": "launching"})
        self.store.save_deployment(dep)
        say(f"launching {cluster} on {deployment.infra}", 0.0)
        started = time.time()
        try:
            request = self.sky.launch(provision, cluster_name=cluster, **self.autodown_arguments(deployment))
            _, handle = self.result_within(request, allowance, f"sky launch {cluster}")
            say(f"{cluster} provisioned in {time.time() - started:.0f} s; starting the servers", 0.4)
            serve = serve_job.serve_task(self, deployment, config, handle)
            left = max(60.0, allowance - (time.time() - started))
            job_id, _ = self.result_within(self.sky.exec(serve, cluster_name=cluster), left, f"serve job on {cluster}")
        except Exception as exc:
            self.store.ledger_update(cluster, "failed", str(exc)[:500])
            self._down_quietly(cluster)
            raise LaunchError(f"SkyPilot launch of {cluster} failed: {exc}") from exc
        if job_id is None:
            self._down_quietly(cluster)
            raise LaunchError(f"SkyPilot launched {cluster} but submitted no job")
        self.serve_jobs[deployment.id] = int(job_id)
        say(f"serve job {job_id} submitted after {time.time() - started:.0f} s; waiting for the servers", 0.5)
        dep = serve_job.record_serving(self, cluster, dep, int(job_id))
        try:
            local = self.endpoints_of(cluster, deployment, options) if deployment.infra.kind == "slurm" else []
            self.wait_ready(cluster, int(job_id), deployment, say, local)
        except LaunchError:
            self._down_quietly(cluster)
            self.store.ledger_gone(cluster, "servers did not come up")
            raise
        endpoints = self.endpoints_of(cluster, deployment, options)
        # one more load of the model: the first, or a relaunch's after a preemption (recover), which is billed as one
        loads = deployment.loads + 1
        dep = dep.model_copy(update={"state": "ready", "ready_at": time.time(), "endpoints": endpoints, "loads": loads})
        self.store.ledger_update(cluster, "ready", f"serve job {job_id}")
        self.store.save_deployment(dep)
        say(f"ready: {', '.join(endpoints)}", 1.0)
        return dep

    def wait_ready(self, cluster: str, job_id: int, deployment: Deployment, say: Progress, local: list[str]) -> None:
        """Until the run script reports every replica ready; servers on loopback (local Slurm) are asked directly."""
        from worldtune.sky.render import PROBE_PATH

        deadline = time.time() + self.allowance_s(deployment) + 120
        # servers on loopback are asked first, the job (a remote call of seconds) only after REMOTE_CHECK_EVERY_S:
        # a first remote check at once held every local launch ~10 s past its servers' readiness (issue 35)
        asked = time.time() if local else -math.inf
        key = self.api_key(deployment) if local else ""
        while time.time() < deadline:
            # with the servers' key: /v1/models answers 401 without it, so the probe never saw them ready (issue 35)
            if local and all(_answers(url + PROBE_PATH, key) for url in local):
                return
            # the job's log and status: at every poll where only they say "ready", else every REMOTE_CHECK_EVERY_S
            if not local or time.time() - asked >= REMOTE_CHECK_EVERY_S:
                asked = time.time()
                log = self.job_log(cluster, job_id)
                if ALL_READY_MARKER in log:
                    return
                if FAILED_MARKER in log:
                    raise LaunchError(f"{cluster}: " + _marker_lines(log, FAILED_MARKER))
                status = self.job_status(cluster, job_id)
                if status in ("FAILED", "FAILED_SETUP", "FAILED_DRIVER", "CANCELLED", "SUCCEEDED"):
                    raise LaunchError(f"{cluster}: serve job {job_id} ended ({status}) before ready:\n{log[-2000:]}")
                say(f"{cluster}: serve job {status or '?'}; {log.count('WORLDTUNE_READY')} replica(s) ready", None)
            time.sleep(self.poll_s)
        raise LaunchError(f"{cluster}: servers not ready within the start-up allowance")

    def endpoints_of(self, cluster: str, deployment: Deployment, options: RenderOptions) -> list[str]:
        slices = replica_slices(deployment.plan, options.base_port)
        if deployment.infra.kind == "slurm":
            # The local Slurm cluster is this machine: its servers are on loopback.
            return [f"http://127.0.0.1:{r.port}" for r in slices]
        urls = {int(port): url for port, url in self.result(self.sky.endpoints(cluster)).items()}
        return [
            f"http://{urls[r.port]}" if not str(urls[r.port]).startswith("http") else str(urls[r.port])
            for r in slices
            if r.port in urls
        ]

    def status(self, deployment: Deployment) -> Deployment:
        """Ask SkyPilot (refreshing from the infra); a ready cluster that vanished or stopped was preempted."""
        if deployment.state == "terminated" or not deployment.cluster:
            return deployment
        from sky.utils import common

        records = self.result(self.sky.status([deployment.cluster], refresh=common.StatusRefreshMode.FORCE))
        up = [r for r in records if str(field_of(r, "status")).endswith("UP")]
        if not up:
            state = "preempted" if deployment.state in ("ready", "loading") else deployment.state
            return deployment.model_copy(update={"state": state, "detail": "cluster gone or not UP"})
        job_id = self.serve_jobs.get(deployment.id) or deployment.handle.serve_job
        if job_id is not None:
            status = self.job_status(deployment.cluster, job_id)
            if status not in ("RUNNING", "PENDING", "SETTING_UP", "INIT", None):
                return deployment.model_copy(update={"state": "failed", "detail": f"serve job {job_id} {status}"})
        return deployment

    def recover(self, deployment: Deployment, progress: Progress | None = None) -> Deployment:
        """Bring a preempted (or failed) deployment back: clean up what is left of its cluster, launch again."""
        self._down_quietly(deployment.cluster or cluster_name(deployment))
        return self.launch(deployment.model_copy(update={"state": "pending", "endpoints": []}), progress)

    def replan(self, deployment: Deployment, plan: str, progress: Progress | None = None) -> Deployment:
        """A new serve job under `plan` on the same cluster (sky.cancel, then sky.exec; no new sky.launch)."""
        return serve_job.replan(self, deployment, plan, progress)

    def teardown(self, deployment: Deployment) -> Deployment:
        cluster = deployment.cluster or cluster_name(deployment)
        self.down(cluster)
        return deployment.model_copy(update={"state": "terminated", "terminated_at": time.time()})

    def down(self, cluster: str) -> str:
        """`sky down` the cluster (idempotent) and mark it gone in the ledger."""
        from sky import exceptions

        try:
            self.result(self.sky.down(cluster))
            result = "down"
        except exceptions.ClusterDoesNotExist:
            result = "already gone"
        self.store.ledger_gone(cluster, result)
        return result

    def _down_quietly(self, cluster: str) -> None:
        try:
            self.down(cluster)
        except Exception as exc:  # keep the ledger row open so `worldtune gc` retries
            self.store.ledger_update(cluster, "down-failed", str(exc)[:500])

    # ---- benchmarks next to the server ------------------------------------------------------------
    def benchmark(
        self,
        deployment: Deployment,
        spec: BenchmarkSpec,
        benchmark_id: str,
        here: MeasureHere,
        progress: Progress | None = None,
        on_job: Callable[[Deployment, int], None] | None = None,
    ) -> tuple[Deployment, BenchmarkResult]:
        """Run `spec` as `worldtune bench` on the cluster against every replica on loopback (a `sky exec` job).

        Samples land in the local Store under `benchmark_id` as they are measured. On preemption the
        deployment is relaunched and the benchmark goes on for what is left (tools/words/deployment.
        benchmark_with_recovery); samples of the cut-short attempt are kept, marked by `here.cut_short`.
        `on_job(deployment, job_id)` is called once each bench job is submitted (tests use it to cut a job short).
        """
        say: Progress = progress or (lambda message, fraction: None)
        if self.store.get_benchmark(benchmark_id) is None:
            config = {**spec.model_dump(mode="json"), "deployment": deployment.id, "where": "cluster (sky exec)"}
            self.store.create_benchmark(benchmark_id, config, deployment.id, deployment.run_id)

        def attempt_on(current: Deployment, attempt: int) -> BenchmarkResult:
            now = spec if attempt == 1 else spec.remainder(here.answered(benchmark_id))  # what was answered is kept
            outcome, result = bench_remote.run_attempt(self, current, now, benchmark_id, attempt, say, on_job, here)
            if outcome == "preempted":
                raise LaunchError(f"benchmark {benchmark_id}: the cluster went away during attempt {attempt}")
            if outcome != "completed" or result is None:
                self.store.update_benchmark(benchmark_id, status="failed", error=outcome)
                raise LaunchError(f"benchmark {benchmark_id} failed: {outcome}")
            measured = BenchmarkResult.model_validate(result)
            self.store.update_benchmark(
                benchmark_id,
                status="completed",
                progress=1.0,
                result=measured.model_dump(mode="json"),
                message=f"completed on attempt {attempt}",
            )
            return measured

        def on_cut(current: Deployment, attempt: int) -> str:  # run_attempt marked them already; this says so
            return here.cut_short(benchmark_id, attempt)

        try:
            return benchmark_with_recovery(self, deployment, attempt_on, on_cut, progress)
        except BaseException as exc:  # out of recoveries, or the relaunch failed: the benchmark has ended
            if (self.store.get_benchmark(benchmark_id) or {}).get("status") == "running":
                self.store.update_benchmark(benchmark_id, status="failed", error=f"{type(exc).__name__}: {exc}")
            raise


def _answers(url: str, key: str = "") -> bool:
    """Whether url answers 200, asked with the servers' API key if given (one reused client: a bare httpx.get builds
    a TLS context, ~10-20 ms of CPU, each time; no connection is kept)."""
    import httpx

    global _CLIENT
    with _CLIENT_LOCK:
        if _CLIENT is None:
            _CLIENT = httpx.Client(timeout=2.0, limits=httpx.Limits(max_keepalive_connections=0))
    try:
        headers = {"Authorization": f"Bearer {key}"} if key else None
        return bool(_CLIENT.get(url, headers=headers).status_code == 200)
    except httpx.HTTPError:
        return False


_CLIENT: Any = None
_CLIENT_LOCK = threading.Lock()


def _marker_lines(log: str, marker: str) -> str:
    return "\n".join(line for line in log.splitlines() if marker in line)[-2000:]
