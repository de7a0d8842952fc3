"""Commands `worldtune twin`, `worldtune bench` and `worldtune results`: rehearse, measure, look back.

`results` is a sub-app: `worldtune results list`, `worldtune results show ID`,
`worldtune results export ID --format csv|json [--out FILE]`; each takes `--db PATH`.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from worldtune.cli import console, emit_json, err_console, fail, finite_json
from worldtune.tools.words.errors import WorldtuneError

if TYPE_CHECKING:
    from worldtune.tools.words.plan import Plan

DbOpt = Annotated[str | None, typer.Option("--db", help="results database (default: $WORLDTUNE_DB or ~/.local/share)")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON for scripts")]

results_app = typer.Typer(help="List, show and export benchmark results from the database.", no_args_is_help=True)


def twin(
    port: Annotated[int, typer.Option(help="first port; replica i listens on port + i")] = 8000,
    host: Annotated[str, typer.Option(help="address to bind")] = "127.0.0.1",
    gpu: Annotated[str, typer.Option(help="GPU type the twin models")] = "H200",
    plan: Annotated[str, typer.Option(help="plan the twin models; an Nx prefix serves N replicas")] = "cfg2-u4-hsdp8",
    model: Annotated[str, typer.Option(help="cosmos3-super | cosmos3-nano | cosmos3-edge | ...")] = "cosmos3-super",
    profile: Annotated[str | None, typer.Option(help="profile YAML the twin runs with (its 'truth')")] = None,
    time_scale: Annotated[float, typer.Option(help="divide every sleep by K; reported times stay in model s")] = 1.0,
    replicas: Annotated[int | None, typer.Option(help="independent replicas on consecutive ports")] = None,
    seed: Annotated[int, typer.Option(help="noise seed (replica i uses seed + i)")] = 0,
    guardrails: Annotated[bool, typer.Option("--guardrails/--no-guardrails", help="server-level guardrails")] = True,
    load_time: Annotated[float | None, typer.Option(help="model seconds of loading (default: from profile)")] = None,
    cold_load: Annotated[
        bool, typer.Option("--cold-load/--warm-load", help="first load on the node (from disk) or warm (page cache)")
    ] = False,
    stage_profiler: Annotated[
        bool,
        typer.Option(
            "--enable-diffusion-pipeline-profiler", help="send stage durations (as vLLM-Omni's flag of that name)"
        ),
    ] = False,
    exit_with: Annotated[
        str | None, typer.Option(help="PID:START_TICKS of an owner process: exit when it is gone", hidden=True)
    ] = None,
    api_key: Annotated[
        str | None, typer.Option(help="as vLLM's --api-key: /v1 routes need `Authorization: Bearer KEY`")
    ] = None,
    preempt_after: Annotated[
        float | None,
        typer.Option(help="model seconds after the load at which the spot node is taken back (rehearsal)", hidden=True),
    ] = None,
) -> None:
    """Serve vLLM-Omni's video API with Cosmos 3 timings from a profile (no GPU needed).

    The port refuses connections until the simulated load is done; a plan that does not fit the GPU's memory
    fails the load (exit 1); SIGUSR1 kills the engine (/health 503, then the server stops).
    """
    import asyncio

    from worldtune.tools.twin.server import TwinConfig, replica_count, serve
    from worldtune.tools.words.plan import Plan

    try:
        config = TwinConfig.from_env(
            model=model,
            gpu=gpu,
            plan=Plan.parse(plan),
            profile_path=profile,
            time_scale=time_scale,
            seed=seed,
            guardrails=guardrails,
            load_time_s=load_time,
            cold_load=cold_load,
            stage_profiler=stage_profiler,
            api_key=api_key or None,
            preempt_after_s=preempt_after,
        )
        count = replica_count(config, replicas)
        from worldtune.tools.twin.server import TwinEngine

        engine = TwinEngine(config)  # validates model, plan and profile before binding ports
        _check_twin_plan(engine, config.plan)
        _check_ports(port, count)
    except (WorldtuneError, ValueError) as exc:
        raise fail(exc) from exc
    ports = ", ".join(str(port + i) for i in range(count))
    owner = None
    if exit_with:
        pid, _, started = exit_with.partition(":")
        if not pid.isdigit() or not started.isdigit():
            raise fail(f"exit_with={exit_with!r} is not valid: expected PID:START_TICKS, e.g. 1234:567890")
        owner = (int(pid), int(started))

    def bound() -> None:  # printed once the ports are bound: from here on, connections are refused until loaded
        err_console.print(
            f"twin: {engine.spec.hf_id} on {gpu} {engine.plan} x{count}, ports {ports} bound, time scale "
            f"{time_scale:g}, loading ({'cold' if cold_load else 'warm'}) {engine.load_s:.0f} model s "
            f"({engine.load_s / time_scale:.2f} s wall)"
        )

    asyncio.run(serve(config, host=host, port=port, replicas=count, on_bound=bound, exit_with=owner))


def _check_twin_plan(engine: Any, plan: Plan) -> None:
    """A twin stands in for vLLM-Omni, so it refuses the plans vLLM-Omni refuses (tp3: 3 does not divide 8 KV heads)."""
    from worldtune.tools.plans.estimate import check_plan
    from worldtune.tools.words.errors import InvalidInput
    from worldtune.tools.words.workload import anchor_workload

    verdict = check_plan(anchor_workload(engine.spec.key), engine.profile.gpu, plan, engine.profile)
    # vLLM-Omni refuses bad parallel flags at start, but a plan too big for the GPU passes them and runs out
    # of memory while loading: the twin does the same (tools/twin/engine.py), so memory is not refused here
    if not verdict.valid and verdict.rule != "memory":
        raise InvalidInput("plan", str(plan), f"a plan vLLM-Omni accepts on {verdict.gpu}", verdict.message)


def _check_ports(port: int, count: int) -> None:
    """Every replica's port (port + i) must be a TCP port; 0 lets the system pick one for a single replica."""
    from worldtune.tools.words.errors import InvalidInput

    if count == 1 and port == 0:
        return
    if not 1 <= port <= 65535 - (count - 1):
        raise InvalidInput(
            "port", port, f"1 to {65535 - (count - 1)} (replica i listens on port + i; {count} replica(s))"
        )


def _csv_ints(text: str, field: str) -> list[int]:
    from worldtune.tools.words.errors import InvalidInput

    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise InvalidInput(field, text, "comma-separated integers, e.g. 1,2,4") from exc
    return values


def bench(
    ctx: typer.Context,
    endpoint: Annotated[list[str], typer.Option(help="base URL of a replica; repeat for several replicas")],
    steps: Annotated[int, typer.Option(help="full-step count (anchor: 35)")] = 35,
    repeats: Annotated[int, typer.Option(help="requests per client at each level, and per probe step count")] = 3,
    concurrency: Annotated[str, typer.Option(help="closed-loop levels, comma-separated")] = "1",
    poisson: Annotated[float | None, typer.Option(help="open-loop Poisson arrivals, requests per hour")] = None,
    requests: Annotated[int, typer.Option(help="requests of the Poisson phase")] = 20,
    seed: Annotated[int, typer.Option(help="seed of the Poisson arrivals")] = 17,
    probe_steps: Annotated[str, typer.Option(help="short step counts of the probes ('' for none)")] = "4,8",
    warmup: Annotated[int, typer.Option(help="warm-up requests (not counted)")] = 2,
    full: Annotated[bool, typer.Option("--full/--no-full", help="run the full-step levels")] = True,
    model: Annotated[str, typer.Option(help="the workload's model")] = "cosmos3-super",
    size: Annotated[str | None, typer.Option(help="WIDTHxHEIGHT (default: the model's)")] = None,
    frames: Annotated[int | None, typer.Option(help="num_frames (default: the model's)")] = None,
    guardrails: Annotated[bool, typer.Option("--guardrails/--no-guardrails", help="per request")] = False,
    label: Annotated[str, typer.Option(help="a name for the benchmark")] = "",
    ready_timeout: Annotated[float, typer.Option(help="wall seconds to wait for every /health to be 200")] = 1800.0,
    wait: Annotated[
        bool, typer.Option("--wait", help="if another benchmark measures these endpoints, wait for it (else refuse)")
    ] = False,
    api: Annotated[
        str, typer.Option(help="sync (POST /v1/videos/sync) | async (jobs: create, poll, download)")
    ] = "sync",
    db: DbOpt = None,
    as_json: JsonOpt = False,
    spec_json: Annotated[
        str | None,
        typer.Option(
            hidden=True,
            help="a whole benchmark spec as JSON (what worldtune's SkyPilot backend sends to a cluster); "
            "--endpoint replaces its endpoints; no other option may be given with it",
        ),
    ] = None,
) -> None:
    """Run the controlled anchor benchmark against vLLM-Omni (or twin) endpoints; store every sample."""
    from worldtune.cli_bench_spec import only_endpoints_with_spec, spec_from_json
    from worldtune.tools.bench.benchmark import BenchmarkSpec, run_benchmark
    from worldtune.tools.store.database import Store
    from worldtune.tools.words.workload import anchor_workload

    try:
        if spec_json is not None:
            only_endpoints_with_spec(ctx)
            spec = spec_from_json(spec_json, endpoint)
        else:
            changes: dict[str, Any] = {"guardrails": guardrails}
            if size:
                w, _, h = size.partition("x")
                changes.update(width=int(w), height=int(h))
            if frames is not None:
                changes["num_frames"] = frames
            spec = BenchmarkSpec(
                endpoints=endpoint,
                workload=anchor_workload(model, **changes),
                steps=steps,
                repeats=repeats,
                concurrency=_csv_ints(concurrency, "concurrency"),
                poisson_rate_per_hour=poisson,
                poisson_requests=requests,
                seed=seed,
                probe_steps=_csv_ints(probe_steps, "probe_steps"),
                warmup=warmup,
                full=full,
                label=label,
                ready_timeout_s=ready_timeout,
                api=api,
            )
        store = Store(db)
    except (WorldtuneError, ValueError) as exc:
        raise fail(exc, as_json) from exc

    def progress(message: str, fraction: float | None) -> None:
        if not as_json:
            done = f"{fraction:4.0%} " if fraction is not None else ""
            err_console.print(f"[dim]{done}{message}[/]")

    try:
        result = run_benchmark(spec, store=store, progress=progress, wait=wait)
    except (WorldtuneError, ValueError) as exc:
        raise fail(exc, as_json) from exc
    if as_json:
        emit_json(result.model_dump(mode="json"))
    else:
        print_result(result)
        console.print(f"[dim]benchmark {result.benchmark_id} stored in {store.path}[/]")


def _f(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def print_result(result: Any) -> None:
    """Tables generated from a BenchmarkResult (never the other way round)."""
    title = f"benchmark {result.benchmark_id}: {result.model}, {result.steps} steps, {', '.join(result.endpoints)}"
    table = Table(title=title, show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    rows: list[tuple[str, str]] = [
        ("model served (X-Model)", result.served_model or "-"),
        ("time scale (model s per wall s)", f"{result.time_scale:g}"),
        ("completed / failed", f"{result.completed_requests} / {result.failed_requests}"),
        ("latency mean (s) [95% CI]", _f(result.latency_mean) + _ci(result.latency_ci)),
        ("latency median (s)", _f(result.latency_median)),
    ]
    for name in ("p90", "p95", "p99"):
        rows.append((f"latency {name} (s)", result.claims.get(name, "-")))
    fit = result.fit
    rows += [
        ("per step (s) [95% CI]", _f(result.per_step_s, 4) + (_ci(fit.per_step_ci, 4) if fit else "")),
        ("fixed (s) [95% CI]", _f(result.fixed_s, 3) + (_ci(fit.fixed_ci, 3) if fit else "")),
        (f"fit predicts {result.steps} steps (s)", _f(result.predicted_full_latency_s)),
        ("measured server time (s)", _f(result.measured_full_server_time_s)),
        ("prediction error", "-" if result.prediction_error_rel is None else f"{result.prediction_error_rel:+.2%}"),
        ("clips/hour (best level)", _f(result.clips_per_hour)),
        ("video s per wall s", _f(result.video_seconds_per_wall_second, 4)),
        ("peak memory MB (max)", _f(result.peak_memory_mb_max, 0)),
        ("failures by kind", ", ".join(f"{k}: {v}" for k, v in result.failures_by_kind.items()) or "none"),
    ]
    for key, value in rows:
        table.add_row(key, value)
    console.print(table)
    if result.levels:
        levels = Table(title="load levels (model seconds)")
        for name in (
            "phase",
            "conc.",
            "rate/h",
            "n",
            "ok",
            "fail",
            "clips/h",
            "qps",
            "lat mean",
            "lat p50",
            "lat p90",
            "server mean",
        ):
            levels.add_column(name, justify="left" if name == "phase" else "right")
        for lv in result.levels:
            p90 = lv.latency.percentiles.get("p90")
            clients = "open" if lv.phase == "poisson" else str(lv.concurrency)
            levels.add_row(
                lv.phase,
                clients,
                _f(lv.rate_per_hour, 0),
                str(lv.requests),
                str(lv.completed),
                str(lv.failed),
                _f(lv.clips_per_hour),
                f"{lv.throughput_qps:.5f}",
                _f(lv.latency.mean),
                _f(lv.latency.median),
                _f(p90.value) if p90 and p90.claimable else f"n/c (n={lv.latency.n})",
                _f(lv.server_time.mean),
            )
        console.print(levels)
    for note in result.notes:
        console.print(f"[yellow]note:[/] {note}")


def _ci(interval: Any, digits: int = 2) -> str:
    if interval is None:
        return ""
    return f" [{_f(interval.low, digits)}, {_f(interval.high, digits)}]"


@results_app.command("list")
def results_list(
    limit: Annotated[int, typer.Option(help="newest N benchmarks")] = 50,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Benchmarks in the database, newest first."""
    from worldtune.tools.store.database import Store

    store = Store(db)
    rows = store.list_benchmarks(limit=limit)
    if as_json:
        emit_json([{k: v for k, v in r.items() if k != "result"} | {"summary": _summary(r)} for r in rows])
        return
    table = Table(title=f"benchmarks in {store.path}")
    for name in ("id", "status", "started", "endpoints", "samples", "latency mean", "clips/h", "per step"):
        table.add_column(name)
    import time as _time

    for r in rows:
        s = _summary(r)
        table.add_row(
            r["id"],
            r["status"],
            _time.strftime("%Y-%m-%d %H:%M:%S", _time.localtime(r["started_at"])),
            ", ".join((r.get("config") or {}).get("endpoints", [])),
            str(len(store.samples(r["id"]))),
            _f(s.get("latency_mean")),
            _f(s.get("clips_per_hour")),
            _f(s.get("per_step_s"), 4),
        )
    console.print(table)


def _summary(row: dict[str, Any]) -> dict[str, Any]:
    result = row.get("result") or {}
    return {k: result.get(k) for k in ("latency_mean", "clips_per_hour", "per_step_s", "fixed_s")}


@results_app.command("show")
def results_show(
    benchmark_id: Annotated[str, typer.Argument(help="benchmark id (see `worldtune results list`)")],
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """One benchmark's result (recomputed from its samples if it never finished)."""
    from worldtune.tools.bench.benchmark import get_benchmark

    try:
        status = get_benchmark(benchmark_id, store_path=db)
    except (WorldtuneError, ValueError) as exc:
        raise fail(exc, as_json) from exc
    if as_json:
        emit_json(status.model_dump(mode="json"))
        return
    console.print(f"status: {status.status} ({status.samples_done} samples) {status.message}")
    if status.error:
        err_console.print(f"[red]error:[/] {status.error}")
    if status.result is not None:
        print_result(status.result)


@results_app.command("export")
def results_export(
    benchmark_id: Annotated[str, typer.Argument(help="benchmark id")],
    fmt: Annotated[str, typer.Option("--format", help="csv (one row per sample) | json (everything)")] = "json",
    out: Annotated[str | None, typer.Option(help="write to this file instead of stdout")] = None,
    db: DbOpt = None,
) -> None:
    """Export a benchmark: its samples as CSV, or config + result + samples as JSON."""
    from worldtune.tools.store.database import Store
    from worldtune.tools.store.db_path import check_out_file
    from worldtune.tools.words.errors import WorldtuneError

    try:
        target = check_out_file(out) if out else None  # before the database is opened or anything is written
        store = Store(db)
    except WorldtuneError as exc:
        raise fail(exc) from exc
    row = store.get_benchmark(benchmark_id)
    if row is None:
        raise fail(f"benchmark={benchmark_id!r} is not valid: no such benchmark in {store.path}")
    samples = [s.record() for s in store.samples(benchmark_id)]  # as stored: the fields the loop measured
    if fmt == "json":
        data = finite_json({"benchmark": row, "samples": samples})
        text = json.dumps(data, indent=2, default=str, allow_nan=False) + "\n"
    elif fmt == "csv":
        text = samples_csv(samples)
    else:
        raise fail(f"format={fmt!r} is not valid: expected csv or json")
    if target is not None:
        try:
            target.write_text(text)
        except OSError as exc:  # a folder, a read-only place: say so, no traceback
            raise fail(f"out={out!r} is not valid: a file worldtune can write ({exc.strerror})") from exc
        err_console.print(f"wrote {len(samples)} samples to {out}")
    else:
        sys.stdout.write(text)


CSV_COLUMNS = [
    "seq",
    "phase",
    "endpoint",
    "concurrency",
    "steps",
    "ok",
    "error_kind",
    "status_code",
    "latency_s",
    "server_time_s",
    "wall_latency_s",
    "sent_at",
    "peak_memory_mb",
    "video_frames",
    "video_width",
    "video_height",
    "video_fps",
    "request_id",
    "detail",
]


def samples_csv(samples: list[dict[str, Any]]) -> str:
    """One row per sample, stable columns."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, extrasaction="ignore")
    writer.writeheader()
    for s in samples:
        writer.writerow({k: s.get(k) for k in CSV_COLUMNS})
    return buffer.getvalue()


def register(app: typer.Typer) -> None:
    """Add twin, bench and results to the worldtune command line."""
    app.command()(twin)
    app.command()(bench)
    app.add_typer(results_app, name="results")
