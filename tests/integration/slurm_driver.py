"""Drives worldtune's SkyPilot backend on the local Slurm cluster, in a child process of the tests.

SkyPilot fixes its paths from HOME when imported, so the tests run this file as a separate process
with the private SkyPilot home in its environment (never the test process's own HOME). It prints one
`DRIVER <json>` line per step; the tests read those and the results database.

    python slurm_driver.py run   --db FILE   launch the twin (H200:8), benchmark next to it, tear down
    python slurm_driver.py fault --db FILE   the same, with the Slurm job scancel'ed mid-benchmark
    python slurm_driver.py replan --db FILE  as run, then change the plan in place (tp8), benchmark, tear down
                          [--deployment-id ID]  the same on a deployment `worldtune deploy` launched, left up
                          [--fault]             the tp8 benchmark's Slurm job scancel'ed mid-benchmark (as fault)
    python slurm_driver.py lanes --db FILE   one claim's full run over two lanes (two clusters) through the agent's
                                             verify node and the MCP tools; both torn down
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from slurm_support import fast_load_profile

from worldtune.sky import catalog, home
from worldtune.tools.bench.benchmark import BenchmarkSpec, Here
from worldtune.tools.deployments.preview import build_deployment, render_options
from worldtune.tools.plans.offers import SNAPSHOT_FILE
from worldtune.tools.store.database import Store
from worldtune.tools.words.deployment import Deployment

FAULT_REPEATS = 6  # requests of a benchmark cut by scancel: the cut lands after 2, so the run is mid-benchmark


def bench_spec(dep: Deployment, repeats: int) -> BenchmarkSpec:
    """The small benchmark each test runs next to the twin: 4 steps, one client, no probes, no warm-up."""
    return BenchmarkSpec(endpoints=dep.endpoints, steps=4, repeats=repeats, concurrency=[1], probe_steps=[], warmup=0,
                         deployment_id=dep.id, plan=str(dep.plan))  # fmt: skip


def say(step: str, **data: Any) -> None:
    print("DRIVER " + json.dumps({"step": step, "t": round(time.time(), 2), **data}, default=str), flush=True)


def scancel_after(store: Store, benchmark_id: str, current: Deployment, samples: int, out: dict[str, Any]) -> None:
    """Cancel the cluster's Slurm allocation once `samples` samples reached the local Store (a preemption).

    The cut must land mid-benchmark whatever the machine's load: the twins of the cluster are paused (SIGSTOP) first,
    so no further request can complete while squeue and scancel run, then the job is cancelled and the twins resumed
    (SIGCONT), so they take Slurm's SIGTERM at once. Only the moment is held; the preemption is Slurm's own."""
    import psutil

    deadline = time.time() + 300
    while time.time() < deadline and len(store.samples(benchmark_id)) < samples:
        time.sleep(0.2)
    assert current.cluster, "a launched deployment names its cluster"
    ports = {e.rstrip("/").rsplit(":", 1)[-1] for e in current.endpoints}
    twins = [p for p in psutil.process_iter(["cmdline"]) if _serves(p.info["cmdline"] or [], ports)]
    for twin in twins:
        twin.suspend()
    # SkyPilot names the Slurm job after the cluster's name on the cloud: <cluster>-<user hash>.
    listing = subprocess.run(["squeue", "-h", "-o", "%i %j"], capture_output=True, text=True).stdout
    jobs = [job for job, name in (line.split() for line in listing.splitlines()) if name.startswith(current.cluster)]
    out["kept_at_cancel"] = len(store.samples(benchmark_id))
    out["slurm_jobs"] = jobs
    out["paused_twins"] = len(twins)
    for job in jobs:
        subprocess.run(["scancel", job], check=True)
    for twin in twins:
        with contextlib.suppress(psutil.NoSuchProcess):
            twin.resume()
    say("scancel", jobs=jobs, samples_at_cancel=out["kept_at_cancel"], paused_twins=len(twins))


def _serves(cmdline: list[str], ports: set[str]) -> bool:
    """A twin server of one of these ports (`worldtune twin --port P ...`, sky/replicas.py)."""
    if "twin" not in cmdline or "--port" not in cmdline:
        return False
    at = cmdline.index("--port") + 1
    return at < len(cmdline) and cmdline[at] in ports


def guard_check(dep: Deployment, db: Path) -> dict[str, Any]:
    """HTTP status of each endpoint's /v1/models without a key, with a wrong one and with the deployment's key."""
    import urllib.error
    import urllib.request

    from worldtune.tools.words.deployment import stored_api_key

    key = stored_api_key(db, dep.id)

    def status(url: str, token: str | None) -> int:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as answer:
                return int(answer.status)
        except urllib.error.HTTPError as e:
            return int(e.code)

    urls = [f"{e}/v1/models" for e in dep.endpoints]
    return {"has_key": bool(key), "none": [status(u, None) for u in urls],
            "wrong": [status(u, "not-the-key") for u in urls], "key": [status(u, key) for u in urls]}  # fmt: skip


class CountingSky:
    """The SkyPilot SDK, counting the calls that start or stop things (a replan must not launch)."""

    def __init__(self, sky: Any) -> None:
        self._sky = sky
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._sky, name)
        if name not in ("launch", "exec", "cancel", "down"):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return attr(*args, **kwargs)

        return counted


def lanes(db: str, infra: str, time_scale: float) -> int:
    """Issue 25: a p50 claim at 95% (5 requests) dealt over two 1-GPU lanes of plan 1gpu, each its own SkyPilot
    cluster (a Slurm job on the 8-GPU node), through the agent's verify node and the MCP tools; both torn down."""
    import asyncio

    from langgraph.runtime import Runtime
    from mcp import Client

    from worldtune.agent.configuration import Context, TuneOptions
    from worldtune.agent.state import VerifyTask
    from worldtune.agent.tools_client import ToolsClient
    from worldtune.agent.verify import verify
    from worldtune.policies.search import Action, candidates, initial_state
    from worldtune.tools.mcp.server import build_server
    from worldtune.tools.plans.offers import all_offers
    from worldtune.tools.words.goal import Goal
    from worldtune.tools.words.workload import anchor_workload

    goal = Goal(workload=anchor_workload(), latency_bound_s=5000, latency_percentile=50, gpus=["H200"],
                confidence=0.95)  # fmt: skip
    cand = next(c for c in candidates(initial_state(goal, all_offers("snapshot"))) if c.offer.gpu_count == 1)
    action = Action(key=cand.key, kind="full", expected_usd=10.0, expected_s=5000.0, needs_deploy=True, reason="",
                    requests=5, lanes=2, lane_requests=[3, 2])  # fmt: skip
    Store(db).add_run("tune-slurm-lanes", "tune")
    options = TuneOptions(infra=infra, engine="twin", time_scale=time_scale, db_path=db, yes=True)
    task = VerifyTask(run_id="tune-slurm-lanes", goal=goal, options=options, action=action, candidate=cand,
                      deployment_id=None, cap_usd=100.0, iteration=1, used_benchmarks=[],
                      billed_deployments=[])  # fmt: skip

    def progress(kind: str, data: dict[str, Any]) -> None:
        say("event", kind=kind, **{k: v for k, v in data.items() if k in ("deployment", "key", "lanes", "requests")})

    async def run() -> dict[str, Any]:
        async with Client(build_server(db)) as client:
            tools = ToolsClient(client)
            update = await verify(task, Runtime(context=Context(tools=tools, progress=progress)))
            (outcome,) = update["results"]
            say("measured", failed=outcome.failed, error=outcome.error, n=len(outcome.measurement.latencies_s),
                lanes=outcome.measurement.lanes, requested=outcome.measurement.requested,
                deployment=outcome.deployment_id, events=update["events"])  # fmt: skip
            for d in Store(db).list_deployments(alive_only=True):  # the first lane: what the run would hand on
                await tools.call("teardown", deployment_id=d.id, confirm=True)
            return update

    asyncio.run(run())
    store = Store(db)
    say("down", ledger_open=store.ledger(open_only=True), ledger=store.ledger(),
        clusters=[d.cluster for d in store.list_deployments()])  # fmt: skip
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["run", "fault", "replan", "lanes"])
    parser.add_argument("--db", required=True)
    parser.add_argument("--time-scale", type=float, default=100.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--fast-load", action="store_true", help="twins load in ~10 model-s (fast_load_profile)")
    parser.add_argument("--deployment-id", help="replan: a deployment `worldtune deploy` launched; left up for gc")
    parser.add_argument("--fault", action="store_true", help="replan: scancel the tp8 benchmark mid-benchmark")
    args = parser.parse_args()
    sky_home = Path(os.environ["WORLDTUNE_SKY_HOME"])
    catalog.write_catalog(sky_home, SNAPSHOT_FILE)  # GPU requests need common/accelerators.csv, even on Slurm
    home.import_skypilot(sky_home)
    from worldtune.sky.backend import SkyPilotBackend

    store = Store(args.db)
    infra = os.environ.get("WORLDTUNE_SLURM_INFRA", "slurm/worldtune-local")
    if args.mode == "lanes":
        return lanes(args.db, infra, args.time_scale)
    backend = SkyPilotBackend(store, poll_s=1.0, predicted=render_options)  # as tools/deploy.backend_for makes it
    counting = CountingSky(backend.sky)
    backend.sky = counting
    started = time.time()

    def progress(message: str, fraction: float | None) -> None:
        say("progress", message=message, elapsed=round(time.time() - started, 1))

    adopted = store.get_deployment(args.deployment_id) if args.deployment_id else None
    if adopted is not None:  # launched by the CLI in another process: this one knows it from the database only
        ready = adopted
    else:
        dep = build_deployment("H200", "cfg2-u4-hsdp8", infra=infra, engine="twin", time_scale=args.time_scale,
                               twin_profile=fast_load_profile() if args.fast_load else None)  # fmt: skip
        store.save_deployment(dep)
        ready = backend.launch(dep, progress)
        store.save_deployment(ready)
    say("ready", deployment=ready.model_dump(mode="json"), launch_s=round(time.time() - started, 1))
    if args.mode in ("run", "replan"):
        say("guarded", **guard_check(ready, Path(args.db)))
    benchmark_id = f"bm-slurm-{args.mode}-{ready.id}"
    fault: dict[str, Any] = {}

    def cut(bench: str) -> Any:
        """on_job for a benchmark whose first Slurm job is scancel'ed once 2 samples are in (a preemption)."""

        def on_job(current: Deployment, job_id: int) -> None:
            if not fault:
                fault["armed"] = True
                threading.Thread(target=scancel_after, args=(store, bench, current, 2, fault), daemon=True).start()

        return on_job

    final = ready
    try:
        final, result = backend.benchmark(
            ready,
            bench_spec(ready, args.repeats),
            benchmark_id,
            Here(store, progress),
            progress,
            on_job=cut(benchmark_id) if args.mode == "fault" else None,
        )
        say("benchmarked", benchmark_id=benchmark_id, result=result.model_dump(mode="json"), fault=fault)
        if args.mode == "replan":
            from worldtune.tools.deployments.replan import replan

            began = time.time()
            final = replan(ready.id, "tp8", store=store, progress=progress, backend=backend)
            say("replanned", deployment=final.model_dump(mode="json"), replan_s=round(time.time() - began, 1),
                sky_calls=list(counting.calls))  # fmt: skip
            repeats = FAULT_REPEATS if args.fault else args.repeats
            final, result = backend.benchmark(
                final,
                bench_spec(final, repeats),
                f"{benchmark_id}-tp8",
                Here(store, progress),
                progress,
                on_job=cut(f"{benchmark_id}-tp8") if args.fault else None,
            )
            say(
                "benchmarked",
                benchmark_id=f"{benchmark_id}-tp8",
                result=result.model_dump(mode="json"),
                plan=final.plan,
                fault=fault,
            )
    finally:
        # an adopted deployment is left to `worldtune gc`, as it is now (a recovery may have relaunched it)
        store.save_deployment(final if adopted is not None else backend.teardown(final))
        say("down", ledger_open=store.ledger(open_only=True), ledger=store.ledger(), sky_calls=list(counting.calls))
    return 0


if __name__ == "__main__":
    sys.exit(main())
