"""Fuzz the MCP tools (hypothesis) and count: calls fuzzed, refusals, refusals without a clear message, and breaks.

Runs the property-based draws of tests/mcp_fuzz_cases.py (the same as tests/unit/tools/test_mcp_fuzz.py) with
more examples, in-process with the MCP SDK's Client, and counts across every call:
calls, refusals, refusals without a clear message (not naming field, value and what would be valid),
starts or stops without confirm=true, commitments above the caps, and answers holding the planted
secret marker. The cloud is tests/fake_cloud.py's recording stand-in (no cloud is reachable here):
`launches` counts the confirmed paid deployments it recorded. Prints a table and saves JSON.

    .venv/bin/python benchmarks/mcp_fuzz.py [--examples 200] [--seed 12] [--out benchmarks/results/mcp_fuzz.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))  # the benchmarks' helpers, also when run by path
from _run_clock import stamped

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("SKYPILOT_DISABLE_USAGE_COLLECTION", "1")


def fuzz(examples: int, seed: int, max_calls: int) -> dict[str, Any]:
    import fake_cloud
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hseed
    from hypothesis import strategies as st
    from mcp_fuzz_cases import Tally, call_strategy, plant_secrets, run_calls

    from worldtune.tools.backends import registry as backend_registry

    work = Path(tempfile.mkdtemp(prefix="wt-fuzz-bench-"))
    os.environ.pop("WORLDTUNE_GUARDRAILS", None)
    os.environ["XDG_CACHE_HOME"] = str(work / "cache")
    os.environ["WORLDTUNE_PROFILE_DIR"] = str(work / "profiles")
    backend_registry.SKY_BACKEND = fake_cloud.SEAM  # type: ignore[misc]
    backend_registry.K8S_BACKEND = fake_cloud.SEAM  # type: ignore[misc]
    secrets = plant_secrets(work / "secrets")
    tally = Tally()
    sequences = [0]

    @hseed(seed)
    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
    @given(calls=st.lists(call_strategy(secrets), min_size=1, max_size=max_calls))
    def one(calls: list[tuple[str, dict[str, Any]]]) -> None:
        sequences[0] += 1
        with tempfile.TemporaryDirectory(dir=work) as folder:
            run_calls(calls, Path(folder) / "wt.db", tally)

    started = time.monotonic()
    one()
    return {"sequences": sequences[0], "wall_s": round(time.monotonic() - started, 1), **tally.as_dict()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=200, help="hypothesis examples (call sequences)")
    parser.add_argument("--max-calls", type=int, default=8, help="most calls in one sequence")
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "mcp_fuzz.json"))
    args = parser.parse_args()
    found = fuzz(args.examples, args.seed, args.max_calls)
    record = {
        "benchmark": "mcp_fuzz",
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": f".venv/bin/python benchmarks/mcp_fuzz.py --examples {args.examples} --max-calls "
        f"{args.max_calls} --seed {args.seed}",
        "machine": {"python": platform.python_version(), "load_avg": os.getloadavg()},
        **found,
    }
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"MCP fuzz: {found['sequences']} sequences, {found['wall_s']} s")
    table.add_column("count")
    table.add_column("value", justify="right")
    keys = ("calls", "refusals", "cap_refusals", "refusals_without_clear_message", "unconfirmed_starts",
            "unconfirmed_stops", "cap_breaches", "leaks", "launches")  # fmt: skip
    for key in keys:
        table.add_row(key, str(found[key]))
    for tool, count in found["by_tool"].items():
        table.add_row(f"  calls to {tool}", str(count))
    Console().print(table)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(stamped(record), indent=2) + "\n")
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
