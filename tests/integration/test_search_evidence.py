"""A full run during which one engine of a two-replica twin deployment is killed is not evidence: the search
rejects it and asks for a retry on a fresh deployment; a second such run fails the candidate. Real twin
processes, the real benchmark client and store; the measurement is read the way the agent's verify node reads it."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from worldtune.agent.steps import measurement_of
from worldtune.policies import search
from worldtune.tools.backends.local import _alive
from worldtune.tools.bench.benchmark import BenchmarkSpec, start_benchmark, wait_benchmark
from worldtune.tools.deployments import deploy as deploying
from worldtune.tools.mcp.results import ResultRecord
from worldtune.tools.plans.offers import all_offers
from worldtune.tools.store.database import Store
from worldtune.tools.words.deploy_request import DeployRequest
from worldtune.tools.words.goal import Goal
from worldtune.tools.words.workload import anchor_workload

pytestmark = pytest.mark.integration
PLAN = "2xcfg2-u2-hsdp4"


def _killed_run(store: Store, db: Path, cand: search.Candidate, requests: int) -> search.Measurement:
    dep = deploying.deploy(DeployRequest(gpu="H200", plan=PLAN, time_scale=1000.0), store=store)
    pids = list(dep.handle.pids)
    try:
        spec = BenchmarkSpec(endpoints=dep.endpoints, workload=anchor_workload(), steps=35, concurrency=[2],
                             repeats=requests // 2, probe_steps=[], warmup=0, deployment_id=dep.id)  # fmt: skip
        bench = start_benchmark(spec, str(db))
        deadline = time.monotonic() + 60
        while not [s for s in store.samples(bench.id) if s.ok] and time.monotonic() < deadline:
            time.sleep(0.05)  # waiting on an event: the first answer stored
        os.kill(pids[0], signal.SIGKILL)  # one engine dies mid-run
        status = wait_benchmark(bench.id, 120, str(db))
        assert status.status != "running"
        samples = [s.record() for s in store.samples(bench.id)]
        record = ResultRecord(benchmark=status, config=store.get_benchmark(bench.id)["config"], samples=samples,
                              sample_count=len(samples))  # fmt: skip
        m = measurement_of(cand, "full", bench.id, record)
        state = deploying.get_deployment(dep.id, store=store).state
        return m.model_copy(update={"engine_problem": "" if state == "ready" else f"deployment {dep.id} is {state}"})
    finally:
        deploying.teardown(dep.id, store=store)
        assert not any(_alive(pid) for pid in pids)


def test_engine_killed_during_a_full_run_is_retried_then_rejected(tmp_path: Path) -> None:
    db = tmp_path / "w.db"
    store = Store(db)
    goal = Goal(objective="min_cost_per_clip", workload=anchor_workload(), latency_bound_s=150, gpus=["H200"],
                capacities=["on-demand"], budget_usd=300)  # fmt: skip
    state = search.initial_state(goal, all_offers("snapshot"))
    cand = next(c for c in search.candidates(state) if str(c.plan) == PLAN)
    first = _killed_run(store, db, cand, 20)
    assert first.requested == 20 and (first.failed_requests > 0 or len(first.latencies_s) < 20)
    once = search.record(state, first)
    assert search.recommendation(once) is None and cand.key in once.retry
    assert once.rejected[-1].benchmark_id == first.benchmark_id and once.rejected[-1].reason
    retry = next(a for a in search.decide(once).actions if a.key == cand.key)
    assert retry.redeploy and retry.needs_deploy and retry.kind == "full"
    twice = search.record(once, _killed_run(store, db, cand, 20))
    assert search.recommendation(twice) is None and cand.key in twice.failed
    assert "rejected 2 times" in twice.failures[cand.key]
