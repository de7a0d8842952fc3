"""What the benchmark harness itself costs: client overhead per request, and the most clients it sustains.

Runs a real `worldtune twin` on loopback at a large time scale and drives it with worldtune's own
benchmark client (tools/bench/benchmark.py, the code `worldtune bench` runs):

1. overhead per request: at one client, wall latency minus the twin's scaled sleep (its reported model
   time / K). This is what the harness adds to every measurement: multipart encoding, HTTP on loopback,
   the twin's request handling and MP4 transfer. Against the real server it is the same order of
   milliseconds on a 100+ second clip.
2. the largest closed-loop concurrency it sustains without a failed request: levels 1, 2, 4, ... up to
   --max-concurrency, stopping at the first level with any failure.

    .venv/bin/python benchmarks/harness_overhead.py [--time-scale 10000] [--requests 60]
        [--max-concurrency 1024] [--out benchmarks/results/harness_overhead.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from rich.console import Console
from rich.table import Table

from worldtune.tools.bench.benchmark import BenchmarkSpec, run_benchmark
from worldtune.tools.store.database import Store
from worldtune.tools.words.workload import anchor_workload

sys.path.insert(0, str(Path(__file__).parent))  # the benchmarks' helpers, also when run by path
from _run_clock import stamped


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_twin(scale: float) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    cmd = [sys.executable, "-m", "worldtune.cli", "twin", "--port", str(port), "--time-scale", str(scale),
           "--load-time", "0"]  # fmt: skip
    # the server's own sync timeout would turn long queues into 504s: set it far higher, as REFERENCE.md advises
    env = {**os.environ, "VLLM_OMNI_VIDEO_SYNC_TIMEOUT": "1e9"}
    proc = subprocess.Popen(cmd, stderr=subprocess.DEVNULL, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health").status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.05)
    proc.terminate()
    raise SystemExit("the twin did not start")


def overhead(url: str, scale: float, requests: int, store: Store) -> dict[str, Any]:
    spec = BenchmarkSpec(endpoints=[url], repeats=requests, concurrency=[1], probe_steps=[], warmup=3)
    result = run_benchmark(spec, store=store)
    samples = [s for s in store.samples(result.benchmark_id) if s.phase == "full" and s.ok]
    extra_ms = np.array([((s.wall_latency_s or 0.0) - (s.server_time_s or 0.0) / scale) * 1000 for s in samples])
    sleep_ms = np.array([(s.server_time_s or 0.0) / scale * 1000 for s in samples])
    return {
        "requests": len(samples),
        "twin_sleep_ms_mean": float(sleep_ms.mean()),
        "overhead_ms_mean": float(extra_ms.mean()),
        "overhead_ms_p50": float(np.percentile(extra_ms, 50)),
        "overhead_ms_p95": float(np.percentile(extra_ms, 95)),
        "overhead_ms_max": float(extra_ms.max()),
        "overhead_model_s_at_scale": float(extra_ms.mean() / 1000 * scale),
        "failed": result.failed_requests,
    }


def concurrency_ramp(url: str, max_c: int, store: Store) -> list[dict[str, Any]]:
    rows = []
    c = 1
    while c <= max_c:
        # a short clip keeps the ramp fast; two requests per client at each level
        spec = BenchmarkSpec(endpoints=[url], workload=anchor_workload(num_frames=61), repeats=2, concurrency=[c],
                             probe_steps=[], warmup=0, steps=35)  # fmt: skip
        started = time.monotonic()
        result = run_benchmark(spec, store=store)
        wall = time.monotonic() - started
        level = result.levels[0]
        rows.append({
            "concurrency": c, "requests": level.requests, "failed": level.failed,
            "failures_by_kind": result.failures_by_kind, "wall_s": wall,
            "requests_per_wall_s": level.requests / wall if wall else 0.0,
        })  # fmt: skip
        if level.failed:
            break
        c *= 2
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--time-scale", type=float, default=10000.0)
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--max-concurrency", type=int, default=1024)
    parser.add_argument("--out", default="benchmarks/results/harness_overhead.json")
    args = parser.parse_args()
    console = Console()
    proc, url = start_twin(args.time_scale)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            store = Store(Path(tmp) / "harness.db")
            over = overhead(url, args.time_scale, args.requests, store)
            ramp = concurrency_ramp(url, args.max_concurrency, store)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    sustained = max((r["concurrency"] for r in ramp if not r["failed"]), default=0)
    report = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}, Python {platform.python_version()}",
        "time_scale": args.time_scale,
        "overhead": over,
        "ramp": ramp,
        "max_concurrency_without_errors": sustained,
        "ramp_stopped_by": "a failed request"
        if ramp and ramp[-1]["failed"]
        else f"--max-concurrency {args.max_concurrency}",
    }
    table = Table(title=f"harness overhead (twin at time scale {args.time_scale:g}, one client)")
    table.add_column("what")
    table.add_column("value", justify="right")
    table.add_row("requests measured", str(over["requests"]))
    table.add_row("twin's scaled sleep per request (ms)", f"{over['twin_sleep_ms_mean']:.1f}")
    for key in ("mean", "p50", "p95", "max"):
        table.add_row(f"client overhead per request, {key} (ms)", f"{over[f'overhead_ms_{key}']:.2f}")
    console.print(table)
    ramp_table = Table(title="closed-loop concurrency ramp (61-frame clips, 2 requests per client)")
    for name in ("clients", "requests", "failed", "wall s", "requests/wall s"):
        ramp_table.add_column(name, justify="right")
    for r in ramp:
        ramp_table.add_row(str(r["concurrency"]), str(r["requests"]), str(r["failed"]), f"{r['wall_s']:.1f}",
                           f"{r['requests_per_wall_s']:.1f}")  # fmt: skip
    console.print(ramp_table)
    console.print(f"largest concurrency without errors: {sustained} ({report['ramp_stopped_by']})")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(stamped(report), indent=2) + "\n")
    console.print(f"saved {out}")


if __name__ == "__main__":
    main()
