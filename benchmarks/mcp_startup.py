"""How fast `worldtune mcp` answers an IDE: cold start to tools/list, and the round trip of `estimate`.

Each run spawns `.venv/bin/worldtune mcp` over stdio with the SDK's own client (as an IDE host does),
and times: process spawn -> session ready (initialize), spawn -> tools/list answered, the first
`estimate` call, and a second (warm) `estimate` call. A second kind of run speaks the protocol
directly over the pipes (initialize, tools/list, close) and reads the server's CPU seconds from the
kernel (wait4), a figure that other work on the machine inflates far less than wall time; it is made
with the cached tool listing (what an IDE sees after the first start) and without it (the first start
after an install or a code change), next to the CPU seconds of a bare `import mcp.server`, the floor
the SDK sets. The cache lives in a temporary folder, not ~/.cache. Repeats, prints min / median / max
and saves every run as JSON, with the machine's load average.

    .venv/bin/python benchmarks/mcp_startup.py [--runs 10] [--out benchmarks/results/mcp_startup.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).parent))  # the benchmarks' helpers, also when run by path
from _run_clock import stamped

ROOT = Path(__file__).resolve().parents[1]
WORLDTUNE = ROOT / ".venv" / "bin" / "worldtune"
ESTIMATE_ARGS = {"model": "cosmos3-super", "gpu": "H200", "plan": "cfg2-u4-hsdp8", "steps": 35}
FIGURES = {
    "ready_s": "spawn -> session initialized",
    "tools_list_s": "spawn -> tools/list answered",
    "estimate_first_s": "estimate round trip (first call)",
    "estimate_warm_s": "estimate round trip (warm)",
    "raw_tools_list_s": "spawn -> tools/list answered (raw pipes)",
    "cpu_s": "server CPU seconds: start, tools/list, exit",
    "cold_tools_list_s": "spawn -> tools/list, no cached listing",
    "cold_cpu_s": "server CPU seconds, no cached listing",
    "sdk_import_cpu_s": "CPU seconds of `python -c 'import mcp.server'`",
}
HANDSHAKE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}},
}


def server_env(cache: Path) -> dict[str, str]:
    home = os.environ.get("HOME", "/root")
    return {"SKYPILOT_DISABLE_USAGE_COLLECTION": "1", "HOME": home, "XDG_CACHE_HOME": str(cache), "PATH": os.defpath}


async def one_run(db: Path, cache: Path) -> dict[str, float]:
    """Spawn the server, list its tools, call estimate twice; seconds from the spawn."""
    params = StdioServerParameters(command=str(WORLDTUNE), args=["mcp", "--db", str(db)], env=server_env(cache))
    start = time.perf_counter()
    async with Client(params) as client:
        ready = time.perf_counter()
        tools = await client.list_tools()
        listed = time.perf_counter()
        first = await client.call_tool("estimate", ESTIMATE_ARGS)
        estimated = time.perf_counter()
        warm = await client.call_tool("estimate", ESTIMATE_ARGS)
        warmed = time.perf_counter()
    if first.is_error or warm.is_error or not tools.tools:
        raise RuntimeError(f"the server did not answer as expected: {first.content}")
    return {
        "ready_s": ready - start,
        "tools_list_s": listed - start,
        "estimate_first_s": estimated - listed,
        "estimate_warm_s": warmed - estimated,
        "tools": float(len(tools.tools)),
    }


def raw_run(db: Path, cache: Path) -> dict[str, float]:
    """initialize + tools/list written straight to the server's stdin; its CPU time from wait4."""
    env = server_env(cache)
    start = time.perf_counter()
    proc = subprocess.Popen(
        [str(WORLDTUNE), "mcp", "--db", str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    messages = [HANDSHAKE, {"jsonrpc": "2.0", "method": "notifications/initialized"}]
    messages.append({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    proc.stdin.write("".join(json.dumps(m) + "\n" for m in messages))
    proc.stdin.flush()
    listed = 0.0
    for line in proc.stdout:
        answer = json.loads(line)
        if answer.get("id") == 2:
            listed = time.perf_counter() - start
            if not answer.get("result", {}).get("tools"):
                raise RuntimeError(f"tools/list failed: {answer}")
            break
    proc.stdin.close()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {"raw_tools_list_s": listed, "cpu_s": usage.ru_utime + usage.ru_stime}


def sdk_import_cpu() -> float:
    """CPU seconds of a Python process that only imports the MCP server SDK."""
    proc = subprocess.Popen([str(WORLDTUNE.parent / "python"), "-c", "import mcp.server"])
    _, _, usage = os.wait4(proc.pid, 0)
    proc.returncode = 0
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "mcp_startup.json"))
    args = parser.parse_args()
    if not WORLDTUNE.exists():
        sys.exit(f"{WORLDTUNE} is missing: run scripts/setup.sh first")
    load_before = os.getloadavg()
    runs: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cache"
        anyio.run(one_run, Path(tmp) / "warmup.db", cache)  # compiles .pyc files, writes the listing; not counted
        for i in range(args.runs):
            run = anyio.run(one_run, Path(tmp) / f"run{i}.db", cache)
            run |= raw_run(Path(tmp) / f"raw{i}.db", cache)
            cold = raw_run(Path(tmp) / f"cold{i}.db", Path(tmp) / f"empty-cache-{i}")
            run |= {"cold_tools_list_s": cold["raw_tools_list_s"], "cold_cpu_s": cold["cpu_s"]}
            run["sdk_import_cpu_s"] = sdk_import_cpu()
            runs.append(run)
    load_after = os.getloadavg()

    summary: dict[str, dict[str, float]] = {}
    for key in FIGURES:
        values = [r[key] for r in runs]
        summary[key] = {"min": min(values), "median": statistics.median(values), "max": max(values)}
    record: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": f"{WORLDTUNE} mcp (stdio, SDK Client)",
        "runs": args.runs,
        "tools": int(runs[0]["tools"]),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_average_before": list(load_before),
        "load_average_after": list(load_after),
        "summary": summary,
        "each_run": runs,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(stamped(record), indent=2) + "\n")

    table = Table(title=f"worldtune mcp over stdio: {args.runs} cold starts ({record['tools']} tools)")
    for name in ("figure", "min s", "median s", "max s"):
        table.add_column(name, justify="left" if name == "figure" else "right")
    for key, label in FIGURES.items():
        s = summary[key]
        table.add_row(label, f"{s['min']:.3f}", f"{s['median']:.3f}", f"{s['max']:.3f}")
    console = Console()
    console.print(table)
    console.print(
        f"load average before/after: {load_before[0]:.2f} / {load_after[0]:.2f} on {record['cpus']} CPUs; saved {out}"
    )


if __name__ == "__main__":
    main()
