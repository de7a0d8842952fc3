"""Benchmark client logic: the spec refuses bad input, timeouts follow the queue, the job API reads the Store."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import pytest

from worldtune.tools.bench.answers import error_kind
from worldtune.tools.bench.benchmark import BenchmarkSpec, get_benchmark
from worldtune.tools.bench.runner import Runner
from worldtune.tools.store.database import Store
from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.result import fit_affine


def spec(**changes: object) -> BenchmarkSpec:
    return BenchmarkSpec.model_validate({"endpoints": ["http://127.0.0.1:9/"], **changes})


def test_spec_defaults_are_the_anchor_and_urls_are_normalised() -> None:
    s = spec()
    assert s.endpoints == ["http://127.0.0.1:9"]
    assert (s.steps, s.repeats, s.concurrency, s.probe_steps) == (35, 3, [1], [4, 8])
    assert s.workload.width == 1280 and s.workload.num_frames == 189 and s.workload.seed == 17
    assert s.planned_requests == 2 + 2 * 3 + 3


@pytest.mark.parametrize(
    "changes",
    [{"endpoints": []}, {"endpoints": ["127.0.0.1:8000"]}, {"steps": 0}, {"concurrency": [0]}, {"repeats": 0},
     {"poisson_rate_per_hour": -1.0}, {"timeout_factor": 0.5}],
)  # fmt: skip
def test_spec_refuses_bad_input(changes: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        spec(**changes)


def test_timeouts_grow_with_the_queue_ahead_and_shrink_with_the_time_scale(tmp_path: Path) -> None:
    runner = Runner(spec(expected_latency_s=120.0), Store(tmp_path / "w.db"), "bm-t", None)
    alone, behind_three = runner.timeout_s(35, 0), runner.timeout_s(35, 3)
    # expected x factor + margin (model s, = wall s at K=1) + a wall margin
    assert alone == pytest.approx(120.0 * 3.0 + 120.0 + 10.0)
    assert behind_three == pytest.approx(120.0 * 4 * 3.0 + 120.0 + 10.0)
    runner.fit = fit_affine([(4, 26.0), (8, 38.0)])  # a measured fit replaces the initial expectation
    assert runner.expected_latency(35) == pytest.approx(14.0 + 35 * 3.0)
    runner.scale = 100.0
    assert runner.timeout_s(35, 0) == pytest.approx(((14.0 + 105.0) * 3.0 + 120.0) / 100.0 + 10.0)


def test_first_timeout_is_derived_not_fixed(tmp_path: Path) -> None:
    runner = Runner(spec(), Store(tmp_path / "w.db"), "bm-t", None)
    # nothing measured, nothing expected: the slowest plausible layout (whole model on one H200) bounds it
    bound = runner.expected_latency(35)
    assert bound > 500.0 and runner.timeout_s(35, 0) != 600.0
    runner.seen[4] = [26.0]  # one warm-up answer at 4 steps bounds 35 steps by proportion
    assert runner.expected_latency(35) == pytest.approx(26.0 * 35 / 4)


def test_requests_spread_to_the_least_busy_endpoint(tmp_path: Path) -> None:
    runner = Runner(spec(endpoints=["http://a:1", "http://b:1"]), Store(tmp_path / "w.db"), "bm-t", None)
    first = runner.pick_endpoint()
    runner.in_flight[first] += 1
    second = runner.pick_endpoint()
    assert {first, second} == {"http://a:1", "http://b:1"}
    runner.in_flight[second] += 1
    assert runner.pick_endpoint() in ("http://a:1", "http://b:1")


def test_error_kinds() -> None:
    assert error_kind(400, '{"error": {"message": "Input was blocked by Cosmos3 guardrails."}}') == "guardrail"
    assert error_kind(400, "num_frames bad") == "bad_request"
    assert error_kind(503, "") == "unavailable"
    assert error_kind(504, "") == "server_timeout"
    assert error_kind(500, "") == "server_error"
    assert error_kind(422, "") == "http_422"


def test_get_benchmark_reports_a_dead_process_and_a_partial_result(tmp_path: Path) -> None:
    store = Store(tmp_path / "w.db")
    config = {"endpoints": ["http://e"], "steps": 35, "workload": {"model": "cosmos3-super"}, "pid": 2**22 + 7,
              "host": __import__("socket").gethostname()}  # fmt: skip
    store.create_benchmark("bm-dead", config)
    for i, (steps, t) in enumerate([(4, 26.0), (8, 38.0)]):
        store.add_sample("bm-dead", i, {"phase": "probe", "steps": steps, "ok": True, "latency_s": t + 1,
                                        "server_time_s": t, "sent_at_model": 0.0, "done_at_model": t})  # fmt: skip
    status = get_benchmark("bm-dead", str(store.path))
    assert status.status == "failed" and "gone" in status.message
    assert status.samples_done == 2 and status.result is not None
    assert status.result.per_step_s == pytest.approx(3.0) and status.result.fixed_s == pytest.approx(14.0)
    assert get_benchmark("bm-dead", str(store.path), partial=False) == status  # ended: its result, whatever partial
    config["host"] = "another-host"  # one still running (its process is elsewhere): a poller's look skips the summary
    store.create_benchmark("bm-live", config)
    store.add_sample("bm-live", 0, {"phase": "probe", "steps": 4, "ok": True, "latency_s": 27.0, "server_time_s": 26.0})
    look = get_benchmark("bm-live", str(store.path), partial=False)
    assert look.status == "running" and look.samples_done == 1 and look.result is None
    assert get_benchmark("bm-live", str(store.path)).result is not None
    with pytest.raises(InvalidInput, match="benchmark_id"):
        get_benchmark("bm-nope", str(store.path))


def test_a_benchmark_ending_between_the_two_looks_is_completed_not_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # CI under load: get_benchmark read "running", then the benchmark thread wrote its result and ended before
    # the liveness check; the real Store is wrapped only to make that interleaving happen every time
    store = Store(tmp_path / "w.db")
    config = {"endpoints": ["http://e"], "steps": 35, "pid": os.getpid(), "host": socket.gethostname()}
    store.create_benchmark("bm-race", config)  # no thread of this process runs it: it has ended
    real = Store.get_benchmark
    looks: list[str] = []

    def look_then_finish(self: Store, benchmark_id: str) -> dict[str, Any] | None:
        row = real(self, benchmark_id)
        if not looks:
            store.update_benchmark(benchmark_id, status="completed", progress=1.0, message="done")
        looks.append(str(row["status"]) if row else "")
        return row

    monkeypatch.setattr(Store, "get_benchmark", look_then_finish)
    status = get_benchmark("bm-race", str(store.path))
    assert looks == ["running", "completed"]
    assert status.status == "completed" and status.message == "done"


def test_an_endpoint_that_never_answers_fails_clearly_and_is_recorded(tmp_path: Path) -> None:
    import socket

    from worldtune.tools.bench.benchmark import run_benchmark

    with socket.socket() as sock:  # a loopback port with nothing listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    store = Store(tmp_path / "w.db")
    with pytest.raises(InvalidInput, match=r"within 0\.5 s"):
        run_benchmark(spec(endpoints=[f"http://127.0.0.1:{port}"], ready_timeout_s=0.5), store=store)
    (row,) = store.list_benchmarks()
    assert row["status"] == "failed" and "InvalidInput" in row["error"]


def test_the_twin_engine_clock_is_not_stretched_by_a_loaded_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every wake-up of the twin comes 20 ms late (a loaded 2-core machine: 20 model s at K=1000): the engine clock
    (X-Twin-Done-At) still spaces queued answers by the simulated service time, and an idle engine's gap counts
    unscaled (the client's turnaround is not K times longer)."""
    import asyncio
    import time

    from worldtune.policies import perf_model
    from worldtune.tools.plans.estimate import resolve_profile
    from worldtune.tools.twin.engine import TwinConfig, TwinEngine, TwinRequest

    engine = TwinEngine(TwinConfig(time_scale=1000.0, load_time_s=0.0, guardrails=False),
                        resolve_profile("H200").with_changes(noise_cv=0.0))  # fmt: skip
    on_time = engine.sleep

    async def late(model_s: float) -> None:
        await on_time(model_s)
        await asyncio.sleep(0.02)

    monkeypatch.setattr(engine, "sleep", late)
    request = TwinRequest(prompt="a cat", width=64, height=64, num_frames=5, fps=24.0, steps=4, guidance_scale=7.0,
                          flow_shift=5.0, seed=0, negative_prompt="", max_sequence_length=512,
                          guardrails=False)  # fmt: skip
    timing = engine._timing(engine.workload_for(request))
    workload = engine.workload_for(request)
    service = timing.total - min(perf_model.overlap_s(workload, engine.prof), timing.vae + timing.mux + timing.client)

    async def main() -> tuple[list[float], float]:
        queued = await asyncio.gather(*(engine.generate(request) for _ in range(3)))
        started = time.monotonic()
        alone = await engine.generate(request)
        wall = time.monotonic() - started
        return [float(g.done_at_model_s or 0.0) for g in queued] + [float(alone.done_at_model_s or 0.0)], wall

    done, wall = asyncio.run(main())
    assert done[1] - done[0] == pytest.approx(service) and done[2] - done[1] == pytest.approx(service)
    assert wall * engine.scale > timing.total + 20.0  # the wall clock x K is stretched by the late wake-ups
    assert timing.total <= done[3] - done[2] < timing.total + 5.0  # the engine clock is not
