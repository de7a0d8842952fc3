"""The twin engine: an HTTP server that speaks vLLM-Omni 0.30's video API and behaves like Cosmos 3 on a plan.

Three parts: tools/twin/engine.py (what a replica does with a request: FIFO, timings from a Profile, memory
and out-of-memory, a dead engine), tools/twin/form.py (the form and its validation, error bodies),
tools/twin/api.py (routes, answers, headers). This module serves them as vLLM's launcher does
(vllm/entrypoints/launchers/launcher.py, vllm_omni/entrypoints/openai/api_server.py `omni_run_server`):
- the port is bound at start but listened on only once the engine has loaded, so a client gets
  "connection refused" for the whole load (the real server builds the engine between `setup_server`'s bind
  and `serve_http`'s listen);
- a plan whose weights, HSDP buffers and runtime do not fit the GPU (by the twin's own profile: the
  rehearsal's truth) fails the load: CUDA's out-of-memory text, then "Initialization failed", exit status 1;
- SIGUSR1 kills the engine (the twin's stand-in for a dying engine core): /health turns 503 and requests
  fail with EngineDeadError; the watchdog then stops the server within 5 model seconds unless
  VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1 (launcher.py `watchdog_loop`, `terminate_if_errored`);
- SIGINT/SIGTERM stop it, also while loading.
`time_scale` K divides every sleep by K; reported times stay in model seconds. The sync timeout
(VLLM_OMNI_VIDEO_SYNC_TIMEOUT, default 600) is read as model seconds and scaled too.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
from collections.abc import Callable
from typing import Any

from worldtune.tools.plans.estimate import resolve_profile
from worldtune.tools.twin.api import TIME_SCALE_HEADER, create_app
from worldtune.tools.twin.engine import (
    WATCHDOG_S,
    EngineDead,
    LoadOutOfMemory,
    TwinConfig,
    TwinEngine,
    TwinRequest,
)
from worldtune.tools.twin.form import ApiError, parse_request
from worldtune.tools.twin.video import make_mp4
from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.workload import anchor_workload

__all__ = [
    "TIME_SCALE_HEADER",
    "ApiError",
    "TwinConfig",
    "TwinEngine",
    "TwinRequest",
    "create_app",
    "parse_request",
    "replica_count",
    "serve",
]


def replica_count(config: TwinConfig, replicas: int | None) -> int:
    """--replicas N wins; else the plan's Nx prefix; else one."""
    if replicas is not None:
        if replicas < 1:
            raise InvalidInput("replicas", replicas, "a positive integer")
        return replicas
    return config.plan.replicas


def bound_socket(host: str, port: int) -> socket.socket:
    """A bound TCP socket that does not listen yet (launcher.py `create_server_socket`): connects are refused."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


def _load_failed(engine: TwinEngine, exc: LoadOutOfMemory) -> None:
    """What the real server prints when a worker runs out of memory at load, then it exits."""
    static = engine.static_memory_gib()
    print(
        f"ERROR twin: torch.OutOfMemoryError: {exc} (loading {engine.spec.hf_id} with {engine.plan} on "
        f"{engine.gpu.name}: weights, buffers and runtime need {static:.1f} GiB per GPU)",
        file=sys.stderr,
        flush=True,
    )
    print("RuntimeError: Initialization failed. Please see the error messages above.", file=sys.stderr, flush=True)


async def serve(
    config: TwinConfig,
    host: str = "127.0.0.1",
    port: int = 8000,
    replicas: int | None = None,
    on_bound: Callable[[], None] | None = None,
    exit_with: tuple[int, int] | None = None,
) -> None:
    """Serve N independent replicas on consecutive ports until SIGINT/SIGTERM (exit 1: the load ran out of memory).

    on_bound: called once every port is bound, before loading (the CLI says so on stderr).
    exit_with: (pid, start ticks) of an owner process: stop once it is gone (a twin started for a run dies
    with it, however it died), loading or serving.
    """
    import uvicorn

    count = replica_count(config, replicas)
    profile = resolve_profile(config.gpu, config.profile_path)
    sockets = [bound_socket(host, port + i) for i in range(count)]
    if on_bound is not None:
        on_bound()

    class _Server(uvicorn.Server):
        # one process, several servers: signals are handled once below, for all of them
        @contextlib.contextmanager
        def capture_signals(self) -> Any:
            yield

    servers: list[_Server] = []
    engines: list[TwinEngine] = []
    for i in range(count):
        server_box: list[_Server] = []

        def terminate(box: list[_Server] = server_box) -> None:
            for server in box:
                server.should_exit = True

        app, engine = create_app(config.model_copy(update={"seed": config.seed + i}), profile, terminate)
        uv_config = uvicorn.Config(app, host=host, port=port + i, log_level="warning", lifespan="off")
        server_box.append(_Server(uv_config))
        servers.append(server_box[0])
        engines.append(engine)

    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()

    def stop() -> None:
        stopping.set()
        for server in servers:
            server.should_exit = True

    def kill_engines() -> None:
        for engine in engines:
            engine.kill()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop)
    loop.add_signal_handler(signal.SIGUSR1, kill_engines)
    watch = asyncio.create_task(_exit_with(exit_with, stop)) if exit_with else None
    preempt: asyncio.Task[None] | None = None
    try:
        if not await _load(engines, stopping):
            return
        # counted from the end of the load: a loaded test machine's slow process start is not the node's time
        preempt = asyncio.create_task(_preempted(config)) if config.preempt_after_s else None
        watchdogs = [asyncio.create_task(_watchdog(e, s)) for e, s in zip(engines, servers, strict=True)]
        await asyncio.gather(*(s.serve(sockets=[sock]) for s, sock in zip(servers, sockets, strict=True)))
        for task in watchdogs:
            task.cancel()
    finally:
        for timer in (watch, preempt):
            if timer is not None:
                timer.cancel()
        for sock in sockets:
            sock.close()


async def _load(engines: list[TwinEngine], stopping: asyncio.Event) -> bool:
    """Load every replica (in parallel, as separate servers do); False when stopped first; exit 1 on a load OOM."""
    default = anchor_workload(engines[0].spec.key)

    async def load_all() -> None:
        # encode the model's default clip now (part of "loading"), not inside the first request's time
        await asyncio.to_thread(make_mp4, default.width, default.height, default.num_frames, default.fps)
        await asyncio.gather(*(e.load() for e in engines))

    loading = asyncio.create_task(load_all())
    waiting = asyncio.create_task(stopping.wait())
    await asyncio.wait({loading, waiting}, return_when=asyncio.FIRST_COMPLETED)
    waiting.cancel()
    if not loading.done():
        loading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loading
        return False
    try:
        loading.result()
    except LoadOutOfMemory as exc:
        _load_failed(engines[0], exc)
        raise SystemExit(1) from None
    except EngineDead:  # SIGUSR1 while loading: the engine never came up
        print("RuntimeError: Initialization failed. Please see the error messages above.", file=sys.stderr)
        raise SystemExit(1) from None
    return True


async def _watchdog(engine: TwinEngine, server: Any) -> None:
    """launcher.py `watchdog_loop`: a dead engine stops the server unless VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1."""
    while True:
        await asyncio.sleep(WATCHDOG_S / engine.scale)
        if engine.dead and not engine.config.keep_alive_on_engine_death:
            server.should_exit = True
            return


PREEMPTED_EXIT = 75  # the exit status of a twin whose spot node was taken back (rehearsed)


async def _preempted(config: TwinConfig) -> None:
    """A spot node taken back (issue 39 item 6): `preempt_after_s` model seconds after its load, the process ends at
    once, as a vanished node: no response finishes, no handler runs."""
    assert config.preempt_after_s is not None
    await asyncio.sleep(config.preempt_after_s / config.time_scale)
    said = f"twin: spot node preempted after {config.preempt_after_s:.0f} model s (rehearsed)"
    print(said, file=sys.stderr, flush=True)
    os._exit(PREEMPTED_EXIT)


async def _exit_with(owner: tuple[int, int], stop: Callable[[], None]) -> None:
    """Stop the servers once the owner process is gone (its pid gone, or reused by another process)."""
    from worldtune.tools.store.owners import process_alive

    while process_alive(*owner):
        await asyncio.sleep(0.5)
    stop()
