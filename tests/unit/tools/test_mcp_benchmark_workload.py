"""start_benchmark's workload arguments through the SDK's in-process client: what is sent, stored and refused.

The deployment is a twin app served by uvicorn in a thread of this process on a loopback port (a
real HTTP server, gone when the test ends), recorded as a local deployment whose process is this one.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp_cases import ok, refused

from worldtune.tools.mcp.server import build_server
from worldtune.tools.plans.estimate import estimate
from worldtune.tools.store.database import Store
from worldtune.tools.twin.server import TwinConfig, create_app
from worldtune.tools.twin.video import make_mp4
from worldtune.tools.words.deployment import Deployment, Handle
from worldtune.tools.words.goal import Goal
from worldtune.tools.words.workload import Workload, anchor_workload

SCALE = 2000.0  # the anchor clip (~120 model s on cfg2-u4-hsdp8) takes ~60 ms
QUICK = {"steps": 35, "repeats": 2, "concurrency": [1], "probe_steps": [], "warmup": 0}


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cached tool listing goes to a temporary folder, never the user's ~/.cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@contextlib.contextmanager
def serving(config: TwinConfig) -> Iterator[str]:
    """The twin app of `config` served by uvicorn in a thread on a free loopback port; its base URL."""
    import uvicorn

    make_mp4(1280, 720, 189, 24)  # encoded up front, as `worldtune twin` does at start-up
    make_mp4(832, 480, 121, 24)
    app, _ = create_app(config)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the twin did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=20)


@pytest.fixture
def twin_url() -> Iterator[str]:
    """A twin (cosmos3-super, cfg2-u4-hsdp8 on H200, guardrails available) on a free loopback port."""
    with serving(TwinConfig(time_scale=SCALE, load_time_s=0.0)) as url:
        yield url


def ready_deployment(store: Store, url: str, plan: str = "cfg2-u4-hsdp8") -> Deployment:
    """The twin recorded as a ready local deployment; its process (this one) is what the backend checks."""
    dep = Deployment(
        gpu="H200", plan=plan, infra="local", engine="twin", state="ready", endpoints=[url],
        time_scale=SCALE, ready_at=time.time(), handle=Handle(pids=[os.getpid()]),
        guardrails=True,  # the fixture's twin runs them, so a guarded workload may be measured on it
    )  # fmt: skip
    store.save_deployment(dep)
    return dep


def with_client(db: Path, body: Any) -> None:
    async def main() -> None:
        async with Client(build_server(str(db))) as client:
            await body(client)

    anyio.run(main)


async def finished(client: Client, benchmark_id: str) -> dict[str, Any]:
    status = await ok(client, "get_benchmark", {"benchmark_id": benchmark_id, "wait_s": 60})
    assert status["status"] == "completed", status
    return await ok(client, "get_result", {"benchmark_id": benchmark_id, "include_samples": True})


def test_workload_arguments_are_sent_stored_and_predicted(tmp_path: Path, twin_url: str) -> None:
    db = tmp_path / "results.db"
    dep = ready_deployment(Store(db), twin_url)
    asked = {"size": "832x480", "num_frames": 121, "guardrails": True, "seed": 5, "prompt": "a red cube rolls"}
    wanted = anchor_workload("cosmos3-super", width=832, height=480, num_frames=121, guardrails=True, seed=5,
                             prompt="a red cube rolls")  # fmt: skip

    async def body(client: Client) -> None:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        schema = tools["start_benchmark"].input_schema
        # one argument per Workload field, by its name (the model comes from the deployment, steps per phase)
        assert set(Workload.model_fields) - {"model", "steps"} <= set(schema["properties"])
        assert "size" in schema["properties"]
        assert "$defs" not in schema  # flat arguments

        started = await ok(client, "start_benchmark", {"deployment_id": dep.id, **QUICK, **asked})
        record = await finished(client, started["id"])
        config = record["config"]
        assert config["workload"] == wanted.model_dump(mode="json")  # the stored config carries the workload
        # the client timeouts start from the prediction for this workload, not the anchor's
        expected = estimate(gpu="H200", plan="cfg2-u4-hsdp8", steps=35, workload=wanted).latency_s
        anchor = estimate(gpu="H200", plan="cfg2-u4-hsdp8", steps=35).latency_s
        assert expected is not None and anchor is not None and expected < anchor
        assert config["expected_latency_s"] == pytest.approx(expected)
        # the twin answered the requested clip: the benchmark decoded 121 frames of 832x480 each time
        full = [s for s in record["samples"] if s["phase"] == "full"]
        assert len(full) == 2 and all(s["ok"] for s in full), full
        assert {(s["video_frames"], s["video_width"], s["video_height"]) for s in full} == {(121, 832, 480)}

        # nothing given: the deployment model's anchor workload, as before
        plain = await ok(client, "start_benchmark", {"deployment_id": dep.id, **QUICK})
        record = await finished(client, plain["id"])
        assert record["config"]["workload"] == anchor_workload("cosmos3-super").model_dump(mode="json")
        assert {s["video_frames"] for s in record["samples"]} == {189}

    with_client(db, body)


def test_a_probe_alone_sends_its_warm_up_and_short_step_counts_and_no_full_clip(tmp_path: Path, twin_url: str) -> None:
    """A search's probe (agent/verify.probe_request, `full` false): the warm-up and the probes' requests alone; the
    fit of latency = fixed + steps x per_step from them; on the client's clock they take what
    policies/search/candidates.probe_seconds prices (the twin serves the profile the search believes)."""
    from worldtune.agent.verify import probe_request
    from worldtune.policies import search
    from worldtune.policies.search import PROBE_REPEATS, PROBE_WARMUP, probe_steps
    from worldtune.policies.search.candidates import probe_seconds
    from worldtune.tools.plans.offers import all_offers

    db = tmp_path / "results.db"
    dep = ready_deployment(Store(db), twin_url)
    request = probe_request(Goal(workload=anchor_workload("cosmos3-super"), latency_bound_s=150))

    async def body(client: Client) -> None:
        started = await ok(
            client, "start_benchmark", {"deployment_id": dep.id, **request.model_dump(exclude={"workload"})}
        )
        record = await finished(client, started["id"])
        phases = [s["phase"] for s in record["samples"]]
        assert phases.count("warmup") == PROBE_WARMUP and "full" not in phases
        assert sorted(s["steps"] for s in record["samples"] if s["phase"] == "probe") == sorted(
            list(probe_steps(35)) * PROBE_REPEATS
        )
        fit = record["benchmark"]["result"]["fit"]
        assert fit["per_step_s"] > 0 and fit["fixed_s"] > 0
        goal = Goal(workload=anchor_workload("cosmos3-super"), latency_bound_s=1e4, gpus=["H200"])
        state = search.initial_state(goal, all_offers("snapshot"))
        cand = next(c for c in search.candidates(state) if str(c.plan) == "cfg2-u4-hsdp8" and c.offer.gpu_count == 8)
        took = sum(s["twin_client_s"] for s in record["samples"])
        assert took == pytest.approx(probe_seconds(cand), rel=0.05)

    with_client(db, body)


def test_a_clip_longer_than_the_sync_timeout_is_measured_through_the_job_api(tmp_path: Path) -> None:
    """Issue 39 item 5: the anchor clip on one H200 takes ~820 model-s, past vLLM-Omni's 600 s sync timeout (the twin
    answers 504 there, on its model clock). By default the benchmark sends each request as a job (create, poll,
    fetch) and every clip is measured; asked for sync, every request times out, as a claim's once did."""
    db = tmp_path / "results.db"
    with serving(TwinConfig(plan="1gpu", time_scale=SCALE, load_time_s=0.0)) as url:
        dep = ready_deployment(Store(db), url, plan="1gpu")

        async def body(client: Client) -> None:
            started = await ok(client, "start_benchmark", {"deployment_id": dep.id, **QUICK})
            record = await finished(client, started["id"])
            assert record["config"]["api"] == "async" and record["config"]["expected_latency_s"] > 600
            full = [s for s in record["samples"] if s["phase"] == "full"]
            assert len(full) == 2 and all(s["ok"] for s in full), full
            assert all(s["server_time_s"] > 600 for s in full)  # answered past the sync timeout, on the model clock
            synced = await ok(client, "start_benchmark", {"deployment_id": dep.id, **QUICK, "api": "sync"})
            status = await ok(client, "get_benchmark", {"benchmark_id": synced["id"], "wait_s": 60})
            record = await ok(client, "get_result", {"benchmark_id": synced["id"], "include_samples": True})
            assert status["status"] != "running" and record["config"]["api"] == "sync"
            full = [s for s in record["samples"] if s["phase"] == "full"]
            assert full and not any(s["ok"] for s in full) and {s["status_code"] for s in full} == {504}, full

        with_client(db, body)


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        ({"size": "833x480"}, ("size", "833x480", "832x480")),
        ({"size": "big"}, ("size", "big", "WIDTHxHEIGHT")),
        ({"size": "832x480", "width": 1280}, ("width", "1280")),
        ({"width": 832}, ("size", "832x720")),
        ({"fps": 25}, ("fps", "25")),
        ({"num_frames": 500}, ("num_frames", "500")),
        ({"guidance_scale": 30.0}, ("guidance_scale", "30")),
        ({"max_sequence_length": 0}, ("max_sequence_length", "0")),
        ({"task": "v2v"}, ("task", "v2v")),
        ({"full": False}, ("full", "probe_steps")),  # no probes and no full runs: nothing to measure
    ],
)
def test_invalid_workload_arguments_are_refused_and_nothing_starts(
    tmp_path: Path, arguments: dict[str, Any], words: tuple[str, ...]
) -> None:
    db = tmp_path / "results.db"
    store = Store(db)
    # No server behind it: a refused workload must be refused before the infra is asked or a request sent.
    dep = ready_deployment(store, "http://127.0.0.1:9")

    async def body(client: Client) -> None:
        await refused(client, "start_benchmark", {"deployment_id": dep.id, **QUICK, **arguments}, *words)

    with_client(db, body)
    assert store.list_benchmarks() == []
    # the infra was not asked (it would have found no server and recorded the deployment as loading)
    assert store.get_deployment(dep.id).state == "ready"  # type: ignore[union-attr]


def test_the_benchmark_sends_a_deployments_generated_api_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A vLLM-Omni deployment launched without $WORLDTUNE_API_KEY gets a generated key (sky/api_key.py): worldtune's
    own benchmark must send it, read from beside the database, or every request is 401 (a twin guarded by the
    key stands in for the GPU server here, over real HTTP)."""
    from worldtune.sky.api_key import deployment_api_key
    from worldtune.tools.bench.benchmark import BenchmarkSpec, auth_headers, run_benchmark
    from worldtune.tools.words.deployment import API_KEY_ENV

    monkeypatch.delenv(API_KEY_ENV, raising=False)
    store = Store(tmp_path / "results.db")
    dep = Deployment(gpu="H200", plan="cfg2-u4-hsdp8", infra="nebius", engine="vllm-omni", state="ready")
    assert auth_headers(store, dep.id) == {}  # no key generated yet
    key = deployment_api_key(store.path, dep)
    assert auth_headers(store, dep.id) == {"Authorization": f"Bearer {key}"}
    assert deployment_api_key(store.path, dep) == key  # kept, not regenerated
    with serving(TwinConfig(time_scale=SCALE, load_time_s=0.0, api_key=key)) as url:
        store.save_deployment(dep.model_copy(update={"endpoints": [url]}))
        spec = BenchmarkSpec(endpoints=[url], steps=35, repeats=2, concurrency=[1], probe_steps=[], warmup=0,
                             deployment_id=dep.id, ready_timeout_s=30)  # fmt: skip
        result = run_benchmark(spec, store)
        full = [s for s in store.samples(result.benchmark_id) if s.phase == "full"]
        assert len(full) == 2 and all(s.ok for s in full), full
