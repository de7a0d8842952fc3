"""What a benchmark request of a deployment is made of: the workload sent and the spec the client runs.

Plain capabilities over the words (Workload, Deployment, BenchmarkSpec), called by the MCP tool
start_benchmark and testable without it. A workload the model cannot take is refused naming the field and
value before the infra is asked or anything starts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

from worldtune.tools.bench.benchmark import BenchmarkSpec, BenchmarkStatus
from worldtune.tools.store.database import Store
from worldtune.tools.words.bench_spec import ApiKind, api_for
from worldtune.tools.words.deployment import Deployment
from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.workload import Workload


def size_fields(size: str | None, width: int | None, height: int | None) -> dict[str, int]:
    """`size` ("WIDTHxHEIGHT") as width and height; refused when it is malformed or contradicts width/height."""
    if size is None:
        return {}
    w, sep, h = size.lower().partition("x")
    if not sep or not w.strip().isdigit() or not h.strip().isdigit():
        raise InvalidInput("size", size, "WIDTHxHEIGHT, e.g. 832x480", "480p is 832x480, 720p is 1280x720")
    found = {"width": int(w), "height": int(h)}
    for key, given in (("width", width), ("height", height)):
        if given is not None and given != found[key]:
            raise InvalidInput(key, given, f"{found[key]} as size={size!r} says, or leave it out")
    return found


def benchmark_workload(model: str, size: str | None = None, **changes: Any) -> Workload:
    """The model's anchor workload with the given fields changed (None: the anchor's value); `size` is
    WIDTHxHEIGHT. Raises InvalidInput for a malformed size, pydantic's ValidationError for a bad field."""
    from worldtune.tools.words.workload import anchor_workload

    fields = {k: v for k, v in changes.items() if v is not None}
    fields.update(size_fields(size, changes.get("width"), changes.get("height")))
    return anchor_workload(model, **fields)


def ready_endpoints(deployment: Deployment) -> list[str]:
    """The endpoints of a deployment that can be benchmarked now; refused unless it is ready with endpoints."""
    if deployment.state != "ready" or not deployment.endpoints:
        raise InvalidInput("deployment_id", deployment.id, f"it is {deployment.state}, not ready")
    return list(deployment.endpoints)


def benchmark_spec(
    deployment: Deployment,
    workload: Workload,
    steps: int,
    repeats: int,
    concurrency: Sequence[int],
    probe_steps: Sequence[int],
    warmup: int,
    run_id: str | None = None,
    api: ApiKind | Literal["auto"] = "auto",
    full: bool = True,
) -> BenchmarkSpec:
    """The spec that measures a ready `deployment` on `workload`; the client timeouts start from the model's
    prediction for that workload on the deployment's plan, and so does the API: "auto" sends each request as a job
    (create, poll, fetch) when the longest clip asked (a full run's, with the clients queued on each replica, or a
    probe's at its largest step count) could outlast vLLM-Omni's sync timeout (bench_spec.api_for), else through the
    sync call."""
    from worldtune.tools.plans.estimate import estimate as predict

    endpoints = ready_endpoints(deployment)
    if workload.guardrails and not deployment.guardrails:
        # vLLM-Omni cannot check what it did not load: the request would run unguarded and be measured as guarded
        raise InvalidInput(
            "guardrails",
            True,
            f"a deployment started with guardrails ({deployment.id} runs with --no-guardrails: the server would skip "
            "the check, so the clip would be measured without it)",
            "deploy with guardrails (the goal's 'with guardrails', deploy --guardrails), or benchmark without them",
        )

    def latency_at(count: int) -> float | None:
        plan = deployment.plan
        return predict(model=deployment.model, gpu=deployment.gpu, plan=plan, steps=count, workload=workload).latency_s

    expected = latency_at(steps)
    if api == "auto":
        queue = math.ceil(max(concurrency, default=1) / max(1, len(endpoints)))  # clients spread over replicas
        longest = max(([steps] if full else []) + list(probe_steps), default=steps)  # a probe asks the goal's steps
        api = api_for(expected if longest <= steps else latency_at(longest), queue if full else 1)
    return BenchmarkSpec(
        endpoints=endpoints,
        workload=workload,
        steps=steps,
        repeats=repeats,
        concurrency=list(concurrency),
        probe_steps=list(probe_steps),
        warmup=warmup,
        full=full,
        expected_latency_s=expected,
        deployment_id=deployment.id,
        plan=str(deployment.plan),
        run_id=run_id or deployment.run_id,
        api=api,
    )


def start_on_deployment(
    deployment: Deployment, spec: BenchmarkSpec, store: Store, wait: bool = False
) -> BenchmarkStatus:
    """Start measuring `deployment` through its infra's backend (`Backend.benchmark`: preemption recovery, and on
    SkyPilot the client next to the server) and return the benchmark's id and status at once."""
    from worldtune.tools.bench import benchmark as benchmarking
    from worldtune.tools.deployments.deploy import backend_for

    backend = backend_for(deployment.infra, store)
    return benchmarking.start_benchmark(spec, str(store.path), wait=wait, backend=backend, deployment=deployment)
