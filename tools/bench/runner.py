"""One benchmark's request loop: wait for /health, warm up, probe two short step counts, run the closed-loop
levels and the open-loop Poisson arrivals, check every answer's video, and store each sample as it ends
(tools/bench/benchmark.py runs it and records its result).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import time
from typing import Any

import numpy as np

from worldtune.tools.bench.answers import engine_clock, error_kind, error_message, float_or_none, json_or_empty
from worldtune.tools.results.compute import compute_result
from worldtune.tools.store.database import Store
from worldtune.tools.words.bench_spec import TIME_SCALE_HEADER, BenchmarkSpec
from worldtune.tools.words.deployment import Progress
from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.result import AffineFit, BenchmarkResult, fit_affine
from worldtune.tools.words.sample import Sample
from worldtune.tools.words.workload import Workload


class Runner:
    """One benchmark in one event loop: sends requests, checks answers, stores samples."""

    def __init__(
        self,
        spec: BenchmarkSpec,
        store: Store,
        benchmark_id: str,
        progress: Progress | None,
        first_seq: int = 0,
        attempt: int | None = None,
    ) -> None:
        self.spec = spec
        self.store = store
        self.id = benchmark_id
        self.progress = progress
        self.seq = first_seq  # a later attempt of a benchmark cut short numbers its samples after the earlier ones
        self.attempt = attempt
        self.done = 0
        self.samples: list[Sample] = []
        self.scale = 1.0
        self.t0 = time.monotonic()
        self.in_flight = dict.fromkeys(spec.endpoints, 0)
        self.fit: AffineFit | None = None
        self.seen: dict[int, list[float]] = {}  # steps -> measured model seconds (before a fit exists)
        self.rr = 0
        self.pending: set[asyncio.Task[None]] = set()

    # ---- time and timeouts ---------------------------------------------------------------------
    def model_now(self) -> float:
        return (time.monotonic() - self.t0) * self.scale

    def expected_latency(self, steps: int) -> float:
        """Model seconds one request of `steps` should take: the fit, else what was seen, else a bound."""
        if self.fit is not None:
            return max(self.fit.predict(steps), 1e-3)
        if self.seen:
            # latency grows at most proportionally with steps (the fixed part does not grow)
            return max(max(v) * max(1.0, steps / s) for s, v in self.seen.items())
        if self.spec.expected_latency_s:
            return self.spec.expected_latency_s * max(1.0, steps / self.spec.steps)
        return _slowest_plausible_latency(self.spec.workload.with_changes(steps=steps))

    def timeout_s(self, steps: int, ahead: int) -> float:
        """Wall seconds to wait for one answer with `ahead` requests of this client queued before it."""
        model = self.expected_latency(steps) * (ahead + 1) * self.spec.timeout_factor + self.spec.timeout_margin_s
        # plus wall seconds for what does not shrink with a twin's time scale (HTTP, encoding a new clip shape)
        return model / self.scale + self.spec.timeout_wall_margin_s

    def pick_endpoint(self) -> str:
        """The endpoint with the fewest requests in flight from this client (round-robin on ties)."""
        eps = self.spec.endpoints
        order = eps[self.rr % len(eps) :] + eps[: self.rr % len(eps)]
        self.rr += 1
        return min(order, key=lambda e: self.in_flight[e])

    # ---- readiness ------------------------------------------------------------------------------
    async def wait_ready(self, client: Any) -> None:
        import httpx

        scales: dict[str, float] = {}
        for endpoint in self.spec.endpoints:
            started = time.monotonic()
            while True:
                try:
                    answer = await client.get(f"{endpoint}/health", timeout=10.0)
                    raw = answer.headers.get(TIME_SCALE_HEADER)
                    scale = float(raw) if raw else 1.0
                    if answer.status_code == 200:
                        scales[endpoint] = scale
                        break
                    if answer.status_code == 503:  # vLLM-Omni 0.30: 503 only when the engine is missing or dead
                        raise InvalidInput("endpoint", endpoint, "a live server", f"/health: 503 {answer.text[:200]}")
                except InvalidInput:
                    raise
                except (httpx.TransportError, ValueError):
                    pass  # a loading vLLM-Omni has bound its port but does not listen: connection refused
                waited = time.monotonic() - started
                if waited > self.spec.ready_timeout_s:
                    raise InvalidInput(
                        "endpoint", endpoint, f"a server whose /health is 200 within {self.spec.ready_timeout_s:g} s"
                    )
                if self.progress and int(waited / 10) != int((waited - 0.2) / 10):
                    self.progress(f"waiting for {endpoint}/health ({waited:.0f} s)", None)
                await asyncio.sleep(0.2)
            await self._check_key(client, endpoint)
        if len(set(scales.values())) > 1:
            raise InvalidInput("endpoints", scales, "endpoints running at one time scale")
        self.scale = next(iter(scales.values()))
        self.t0 = time.monotonic()

    async def _check_key(self, client: Any, endpoint: str) -> None:
        """Once /health answers (it needs no key): a server started with --api-key refuses every /v1 route without
        it (401), so a benchmark would fail every request; refuse it before any is sent, naming the key, never its
        value."""
        import httpx

        try:
            answer = await client.get(f"{endpoint}/v1/models", timeout=10.0)
        except httpx.TransportError:
            return  # the requests will say what is wrong with the endpoint
        if answer.status_code in (401, 403):
            from worldtune.tools.words.deployment import API_KEY_ENV

            sent = "Authorization" in client.headers
            raise InvalidInput(
                API_KEY_ENV,
                "set, and refused by the server" if sent else "not set",
                f"the API key {endpoint} was started with (vllm serve --api-key): /v1/models answered "
                f"{answer.status_code}",
                f"export {API_KEY_ENV}=<the server's key> and run the benchmark again",
            )

    # ---- one request ----------------------------------------------------------------------------
    async def request(
        self,
        client: Any,
        phase: str,
        steps: int,
        concurrency: int,
        endpoint: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        """Send one request and wait for its answer; checking the clip and storing the sample run on in a task,
        so a closed-loop client sends its next request at once (its think time stays near zero)."""
        import httpx

        endpoint = endpoint or self.pick_endpoint()
        seq = self.seq
        self.seq += 1
        workload = self.spec.workload.with_changes(steps=steps)
        form = [(k, (None, v)) for k, v in workload.form_fields().items()]  # (None, value): a plain multipart field
        ahead = self.in_flight[endpoint]
        timeout = self.timeout_s(steps, ahead)
        self.in_flight[endpoint] += 1
        sample = Sample(
            seq=seq,
            phase=phase,
            steps=steps,
            concurrency=concurrency,
            endpoint=endpoint,
            sent_at=time.time(),
            sent_at_model=self.model_now(),
            client_timeout_s=timeout * self.scale,
            queue_ahead=ahead,
            ok=False,
            error_kind=None,
            status_code=None,
            **({"attempt": self.attempt} if self.attempt is not None else {}),
            video_seconds=workload.video_seconds,
            **(extra or {}),
        )
        body: bytes | None = None
        started = time.monotonic()
        try:
            if self.spec.api == "async":
                body = await self._job(client, endpoint, form, timeout, steps, sample)
                wall = time.monotonic() - started
            else:
                answer = await client.post(f"{endpoint}/v1/videos/sync", files=form, timeout=timeout)
                wall = time.monotonic() - started
                sample.status_code = answer.status_code
                if answer.status_code == 200:
                    body = answer.content
                    self._accept_headers(sample, answer.headers)
                else:
                    sample.error_kind = error_kind(answer.status_code, answer.text)
                    sample.detail = error_message(answer)
        except httpx.TimeoutException:
            wall = time.monotonic() - started
            sample.error_kind = "client_timeout"
            sample.detail = f"no answer within {timeout * self.scale:.0f} model s ({ahead} queued ahead)"
        except httpx.TransportError as exc:
            wall = time.monotonic() - started
            sample.error_kind = "connection"
            sample.detail = f"{type(exc).__name__}: {exc}"
        except (ValueError, KeyError) as exc:  # a job answer that is not the JSON vLLM-Omni sends
            wall = time.monotonic() - started
            sample.error_kind = "bad_response"
            sample.detail = f"{type(exc).__name__}: {exc}"
        finally:
            self.in_flight[endpoint] -= 1
        sample.wall_latency_s = wall
        sample.latency_s = wall * self.scale
        sample.done_at_model = self.model_now()
        if sample.ok and phase in ("warmup", "probe"):
            self.seen.setdefault(steps, []).append(float(sample.server_time() or wall * self.scale))
        task = asyncio.create_task(self._record(sample, body, workload))
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)

    async def _job(
        self, client: Any, endpoint: str, form: Any, timeout: float, steps: int, sample: Sample
    ) -> bytes | None:
        """The async API: create a job, poll it, download the clip, delete the job (no sync timeout applies)."""
        import httpx

        deadline = time.monotonic() + timeout
        created = await client.post(f"{endpoint}/v1/videos", files=form, timeout=timeout)
        sample.status_code = created.status_code
        if created.status_code != 200:
            sample.error_kind = error_kind(created.status_code, created.text)
            sample.detail = error_message(created)
            return None
        video_id = created.json()["id"]
        sample.request_id = video_id
        # poll often enough that the answer is seen within ~1% of a clip's time (wall)
        interval = min(5.0, max(0.01, self.expected_latency(steps) / 100 / self.scale))
        try:
            while True:
                await asyncio.sleep(interval)
                if time.monotonic() > deadline:
                    raise httpx.ReadTimeout(f"job {video_id} not done in time")
                polled = await client.get(f"{endpoint}/v1/videos/{video_id}", timeout=timeout)
                job = polled.json()
                if polled.status_code != 200 or job.get("status") == "failed":
                    error = job.get("error") or {}
                    code = int(error.get("code") or polled.status_code)
                    sample.status_code = code
                    sample.error_kind = error_kind(code, str(error.get("message", "")))
                    sample.detail = str(error.get("message") or polled.text)[:500]
                    return None
                if job.get("status") == "completed":
                    break
            content = await client.get(f"{endpoint}/v1/videos/{video_id}/content", timeout=timeout)
        finally:
            with contextlib.suppress(httpx.HTTPError):  # leave nothing queued or stored on the server
                await client.delete(f"{endpoint}/v1/videos/{video_id}", timeout=10.0)
        sample.status_code = content.status_code
        if content.status_code != 200:
            sample.error_kind = error_kind(content.status_code, content.text)
            sample.detail = error_message(content)
            return None
        sample.server_time_s = float_or_none(job.get("inference_time_s"))
        sample.served_model = content.headers.get("X-Model") or (str(job["model"]) if job.get("model") else None)
        engine_clock(sample, content.headers)
        sample.peak_memory_mb = float_or_none(job.get("peak_memory_mb"))
        sample.stage_durations = job.get("stage_durations") or {}
        sample.ok = True
        return bytes(content.content)

    def _accept_headers(self, sample: Sample, headers: Any) -> None:
        sample.request_id = headers.get("X-Request-Id")
        sample.served_model = headers.get("X-Model")
        sample.server_time_s = float_or_none(headers.get("X-Inference-Time-S"))
        sample.peak_memory_mb = float_or_none(headers.get("X-Peak-Memory-MB"))
        sample.stage_durations = json_or_empty(headers.get("X-Stage-Durations"))
        engine_clock(sample, headers)
        sample.ok = True

    async def _record(self, sample: Sample, body: bytes | None, workload: Workload) -> None:
        """Check the clip, then write the sample to the Store (a sample counts once it is written)."""
        if body is not None and self.spec.check_video:
            from worldtune.tools.twin.video import check_mp4, served_frames, served_size

            try:
                info = await asyncio.to_thread(check_mp4, body)
            except InvalidInput as exc:
                sample.ok, sample.error_kind, sample.detail = False, "bad_video", str(exc)
            else:
                sample.video_frames, sample.video_width, sample.video_height = info.frames, info.width, info.height
                sample.video_fps, sample.video_bytes = info.fps, info.bytes
                # the Cosmos 3 pipeline rounds frames up to 4k + 1 and sides down to multiples of 16
                width, height = served_size(workload.width, workload.height)
                wrong = info.mismatches(served_frames(workload.num_frames), width, height, workload.fps)
                if wrong:
                    sample.ok, sample.error_kind, sample.detail = False, "bad_video", "; ".join(wrong)
        state = "ok" if sample.ok else sample.error_kind
        message = f"{sample.phase} {sample.steps} steps c={sample.concurrency}: {state}"
        fraction = min(1.0, (self.done + 1) / max(1, self.spec.planned_requests))
        await asyncio.to_thread(self._store_sample, sample, fraction, message)  # off the loop: SQLite commits
        self.samples.append(sample)
        self.done += 1
        if self.progress:
            self.progress(message, fraction)

    def _store_sample(self, sample: Sample, fraction: float, message: str) -> None:
        self.store.add_sample(self.id, sample.seq, sample)
        self.store.update_benchmark(self.id, progress=fraction, message=message)

    async def drain(self) -> None:
        """Wait until every answered request is checked and stored."""
        while self.pending:
            await asyncio.gather(*list(self.pending))

    # ---- phases ---------------------------------------------------------------------------------
    async def run(self) -> None:
        import httpx

        spec = self.spec
        # idle connections expire before the server's keep-alive (uvicorn's default is 5 s), so the client never
        # reuses one the server is closing at that very moment (a spurious connection error under heavy load)
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None, keepalive_expiry=2.0)
        headers = auth_headers(self.store, spec.deployment_id)
        async with httpx.AsyncClient(limits=limits, timeout=None, headers=headers, verify=tls_context()) as client:
            await self.wait_ready(client)
            warm_steps = spec.warmup_steps or (min(spec.probe_steps) if spec.probe_steps else 4)
            for steps in {spec.steps, warm_steps, *spec.probe_steps}:
                self.timeout_s(steps, 0)  # the first bound loads a profile: do it before any arrival is timed
            if spec.warmup:
                await asyncio.gather(
                    *(self._sequence(client, "warmup", warm_steps, spec.warmup, e) for e in spec.endpoints)
                )
            for steps in spec.probe_steps:
                for _ in range(spec.repeats):
                    await self.request(client, "probe", steps, 1)
            await self.drain()
            probe = [s for s in self.samples if s.phase == "probe" and s.ok]
            self.fit = fit_affine([(s.steps, float(s.server_time() or 0.0)) for s in probe]) or self.fit
            if spec.full:
                for c in spec.concurrency:
                    await asyncio.gather(*(self._closed_loop_client(client, c) for _ in range(c)))
            if spec.poisson_rate_per_hour:
                await self._poisson(client, spec.poisson_rate_per_hour, spec.poisson_requests)
            await self.drain()

    async def _sequence(self, client: Any, phase: str, steps: int, n: int, endpoint: str) -> None:
        for _ in range(n):
            await self.request(client, phase, steps, 1, endpoint=endpoint)

    async def _closed_loop_client(self, client: Any, concurrency: int) -> None:
        for _ in range(self.spec.repeats):
            await self.request(client, "full", self.spec.steps, concurrency)

    async def _poisson(self, client: Any, rate_per_hour: float, n: int) -> None:
        rng = np.random.default_rng(self.spec.seed)
        gaps = rng.exponential(3600.0 / rate_per_hour, size=n)  # model seconds between arrivals
        tasks = []
        start = time.monotonic()
        at = 0.0
        for gap in gaps:
            at += float(gap)
            delay = start + at / self.scale - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            extra = {"rate_per_hour": rate_per_hour, "arrival_model_s": at}
            tasks.append(asyncio.create_task(self.request(client, "poisson", self.spec.steps, 0, extra=extra)))
        await asyncio.gather(*tasks)

    def result(self, wall: float) -> BenchmarkResult:
        return compute_result(
            self.samples,
            benchmark_id=self.id,
            endpoints=self.spec.endpoints,
            model=self.spec.workload.model,
            steps=self.spec.steps,
            time_scale=self.scale,
            wall_duration=wall,
        )


def auth_headers(store: Store | None = None, deployment_id: str | None = None) -> dict[str, str]:
    """The bearer token of a server started with an API key, on every request and probe: $WORLDTUNE_API_KEY,
    else the key generated for the deployment at launch (sky/backend.py keeps it, 0600, beside the database)."""
    from worldtune.tools.words.deployment import API_KEY_ENV, stored_api_key

    key = (
        stored_api_key(store.path, deployment_id)
        if store is not None and deployment_id
        else os.environ.get(API_KEY_ENV)
    )
    return {"Authorization": f"Bearer {key}"} if key else {}


@functools.lru_cache(maxsize=1)
def tls_context() -> Any:
    """httpx's default TLS context (certifi's CA bundle, or $SSL_CERT_FILE/$SSL_CERT_DIR), built once per process:
    every client built its own, reading and parsing the CA bundle (~15 ms of CPU) for each benchmark, even on
    loopback (issue 35: 0.25 s of the main job's agent CPU). Shared, it verifies exactly as before."""
    import httpx

    return httpx.create_ssl_context()


def preload() -> None:
    """Import what the loop needs before it starts: a first import inside it (scipy: ~2 s) would stall requests."""
    import av  # noqa: F401
    import httpx  # noqa: F401
    import scipy.stats  # noqa: F401


@functools.lru_cache(maxsize=32)
def _slowest_plausible_latency(workload: Workload) -> float:
    """Before any answer: the model's latency of the whole model on one H200 (slower than any real plan)."""
    from worldtune.policies import perf_model
    from worldtune.tools.plans.estimate import resolve_profile
    from worldtune.tools.words.plan import Plan

    return perf_model.predict(workload, Plan(), resolve_profile("H200")).latency_s
