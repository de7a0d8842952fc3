"""What a sceptical first user tries (issue 36): hostile inputs over the command line and MCP, each checked for a
clean refusal. Per case it records whether the input was refused (exit 2, or an MCP tool error), whether the
reason is one line (no traceback, at most 600 characters) naming the field, whether a planted secret from a
file it pointed at was echoed, whether any file appeared outside the case's own folder (/etc, the working
folder, beside the paths given), and whether a run, benchmark or deployment was started.

Every case runs in a fresh temporary folder with its own results database ($WORLDTUNE_DB); the CLI cases are
subprocesses of `.venv/bin/worldtune`, the MCP cases calls of the MCP SDK's Client on an in-process server (as
an IDE's stdio server would answer them). Nothing here is simulated or assumed: the figures are counts.

    .venv/bin/python benchmarks/hostile_inputs.py [--out benchmarks/results/hostile_inputs.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))  # the benchmarks' helpers, also when run by path
from _run_clock import stamped

ROOT = Path(__file__).resolve().parents[1]
WORLDTUNE = str(Path(sys.executable).parent / "worldtune")
SECRET = "do-not-echo-3f9a"
GOAL = "cheapest per clip, p95 under 150 s"
DEPLOY = ["deploy", "--gpu", "H200", "--plan", "tp8"]

# (name, arguments with {tmp}, {secret} or {dir} placeholders, the field the reason must name)
CLI_CASES: list[tuple[str, list[str], str]] = [
    *[
        (f"tune --db {label}", ["tune", GOAL, "--yes", "--json", "--db", path], "db")
        for label, path in (
            ("folder", "{dir}"),
            ("/sys", "/sys"),
            ("text file", "{secret}"),
            ("/dev/null", "/dev/null"),
            ("/proc/self/x", "/proc/self/x.db"),
            ("file/child", "{secret}/x.db"),
            ("empty", ""),
        )
    ],
    *[
        (f"results list --db {label}", ["results", "list", "--db", path], "db")
        for label, path in (
            ("folder", "{dir}"),
            ("/sys", "/sys"),
            ("text file", "{secret}"),
            ("/dev/null", "/dev/null"),
            ("/etc/passwd", "/etc/passwd"),
        )
    ],
    *[
        (f"gc --db {label}", ["gc", "--db", path], "db")
        for label, path in (
            ("folder", "{dir}"),
            ("/sys", "/sys"),
            ("text file", "{secret}"),
            ("/etc/passwd", "/etc/passwd"),
        )
    ],
    ("resume --db text file", ["resume", "tune-x", "--db", "{secret}"], "db"),
    ("report --db text file", ["report", "tune-x", "--db", "{secret}"], "db"),
    ("mcp --db text file", ["mcp", "--db", "{secret}"], "db"),
    ("results export --out folder", ["results", "export", "bm-x", "--out", "{dir}"], "out"),
    ("results export --out /sys/x", ["results", "export", "bm-x", "--out", "/sys/x.json"], "out"),
    ("results export --out missing folder", ["results", "export", "bm-x", "--out", "{tmp}/no/such/x.json"], "out"),
    ("deploy --dry-run --out file", [*DEPLOY, "--dry-run", "--out", "{secret}"], "out"),
    ("deploy --dry-run --out /sys/x", [*DEPLOY, "--dry-run", "--out", "/sys/worldtune-x"], "out"),
    ("deploy --dry-run --out file/child", [*DEPLOY, "--dry-run", "--out", "{secret}/x"], "out"),
    ("calibrate --out folder", ["calibrate", "--from-raw", "{secret}", "--out", "{dir}"], "out"),
    *[
        (f"deploy --dry-run --hours {h}", [*DEPLOY, "--dry-run", f"--hours={h}"], "hours")
        for h in ("-1", "1e400", "721", "nan", "inf")
    ],
    *[(f"deploy --hours {h}", [*DEPLOY, f"--hours={h}", "--yes"], "hours") for h in ("-1", "1e400", "721")],
    *[
        (f"tune --budget {b}", ["tune", GOAL, "--yes", "--json", "--budget", b], "budget")
        for b in ("1e12", "-5", "0", "inf", "nan", "1e400")
    ],
    *[
        (f"tune goal: {g}", ["tune", g, "--yes", "--json"], f)
        for g, f in (
            ("p95 under 100 s and p95 over 200 s", "p95"),
            ("p95 under -5 s", "-5"),
            ("p95 under 150 s, budget $inf", "$inf"),
            ("make it fast", "fast"),
            ("p95", "p95"),
            ("cheapest, at least -3 clips per hour", "-3"),
            ("p95 under 150 s, fp8 ok, no fp8", "fp8"),
            ("", "tune"),
            ("日本語🎥", "日本語"),
            ("cheapest, spot ok, no spot", "spot"),
        )
    ],
    ("tune --mcp-token without --mcp-url", ["tune", GOAL, "--yes", "--mcp-token", "abc"], "mcp_token"),
    ("tune --mcp-url nothing there", ["tune", GOAL, "--yes", "--mcp-url", "http://127.0.0.1:9/mcp"], "mcp_url"),
    ("tune --time-scale 0", ["tune", GOAL, "--yes", "--json", "--time-scale", "0"], "time_scale"),
    ("tune --infra azure", ["tune", GOAL, "--yes", "--json", "--infra", "azure"], "infra"),
    (
        "tune --twin-profile secret file",
        ["tune", GOAL, "--yes", "--json", "--twin-profile", "{secret}"],
        "twin_profile",
    ),
    ("tune --confidence 2", ["tune", GOAL, "--yes", "--json", "--confidence", "200"], "confidence"),
    ("estimate --plan tp3", ["estimate", "--plan", "tp3", "--json"], "tp"),
    ("estimate --gpu A100", ["estimate", "--plan", "tp8", "--gpu", "A100"], "gpu"),
    ("estimate --profile secret file", ["estimate", "--plan", "tp8", "--profile", "{secret}"], "profile"),
    ("deploy --plan tp8-hsdp8", ["deploy", "--gpu", "H200", "--plan", "tp8-hsdp8", "--dry-run"], "hsdp"),
    ("deploy --dry-run slurm without a price", [*DEPLOY, "--infra", "slurm/x", "--dry-run"], "usd_per_hour"),
    ("deploy --engine tensorrt", [*DEPLOY, "--engine", "tensorrt", "--dry-run"], "engine"),
    ("deploy --capacity cheap", [*DEPLOY, "--capacity", "cheap", "--dry-run"], "capacity"),
    ("bench --endpoint ftp", ["bench", "--endpoint", "ftp://127.0.0.1:1", "--repeats", "1"], "endpoint"),
    ("bench --repeats 100000", ["bench", "--endpoint", "http://127.0.0.1:9", "--repeats", "100000"], "repeats"),
    ("twin --plan tp3", ["twin", "--plan", "tp3", "--port", "9"], "plan"),
]
HUGE = 10**8
MCP_CASES: list[tuple[str, str, dict[str, Any], str]] = [
    *[
        (f"{tool}: unknown field", tool, {"zz_misspelt": 1}, "zz_misspelt")
        for tool in (
            "estimate",
            "list_plans",
            "list_offers",
            "validate_plan",
            "deploy",
            "provision",
            "start_benchmark",
            "get_benchmark",
            "teardown",
            "start_tuning",
            "get_tuning",
            "approve_tuning",
            "plan_capacity",
            "rehearse_fleet",
            "heartbeat_run",
            "list_results",
            "get_result",
            "compare_results",
            "write_report",
            "record_run",
            "mark_run",
            "record_fleet",
            "replan_deployment",
            "get_deployment",
            "list_deployments",
        )
    ],
    ("estimate: stpes", "estimate", {"plan": "tp8", "stpes": 50}, "stpes"),
    ("list_plans: latency_bound", "list_plans", {"gpu": "H200", "latency_bound": 100}, "latency_bound"),
    ("estimate: steps '35'", "estimate", {"plan": "tp8", "steps": "35"}, "steps"),
    ("estimate: steps 35.5", "estimate", {"plan": "tp8", "steps": 35.5}, "steps"),
    ("estimate: steps true", "estimate", {"plan": "tp8", "steps": True}, "steps"),
    ("estimate: plan 8", "estimate", {"plan": 8}, "plan"),
    ("list_plans: gpus '8'", "list_plans", {"gpu": "H200", "gpus": "8"}, "gpus"),
    ("deploy: hours 1e6", "deploy", {"gpu": "H200", "plan": "tp8", "hours": 1e6}, "hours"),
    ("deploy: hours -1", "deploy", {"gpu": "H200", "plan": "tp8", "hours": -1}, "hours"),
    ("deploy: confirm 'yes'", "deploy", {"gpu": "H200", "plan": "tp8", "infra": "nebius", "confirm": "yes"}, "confirm"),
    ("deploy: plan tp3", "deploy", {"gpu": "H200", "plan": "tp3"}, "plan"),
    ("deploy: gpu A100", "deploy", {"gpu": "A100", "plan": "tp8"}, "gpu"),
    (
        "provision: usd_per_hour 1e9",
        "provision",
        {"gpu": "H200", "plan": "tp8", "infra": "slurm/x", "usd_per_hour": 1e9},
        "usd_per_hour",
    ),
    (
        "start_benchmark: concurrency x100000",
        "start_benchmark",
        {"deployment_id": "wt-x", "concurrency": [1] * 100_000},
        "concurrency",
    ),
    (
        "start_benchmark: probe_steps x50000",
        "start_benchmark",
        {"deployment_id": "wt-x", "probe_steps": [4] * 50_000},
        "probe_steps",
    ),
    ("start_benchmark: repeats 1000000", "start_benchmark", {"deployment_id": "wt-x", "repeats": 1_000_000}, "repeats"),
    ("start_benchmark: steps 100000", "start_benchmark", {"deployment_id": "wt-x", "steps": 100_000}, "steps"),
    ("start_benchmark: no such deployment", "start_benchmark", {"deployment_id": "wt-nope"}, "deployment_id"),
    ("start_tuning: budget 1e308", "start_tuning", {"goal": GOAL, "budget_usd": 1e308}, "budget_usd"),
    ("start_tuning: budget -1", "start_tuning", {"goal": GOAL, "budget_usd": -1}, "budget_usd"),
    ("start_tuning: conflicting goal", "start_tuning", {"goal": "p95 under 100 s and p95 over 200 s"}, "p95"),
    ("start_tuning: goal $inf", "start_tuning", {"goal": "p95 under 150 s, budget $inf"}, "$inf"),
    ("start_tuning: time_scale 0", "start_tuning", {"goal": GOAL, "time_scale": 0}, "time_scale"),
    ("start_tuning: max_iterations 1e6", "start_tuning", {"goal": GOAL, "max_iterations": HUGE}, "max_iterations"),
    ("start_tuning: grace_s 1e9", "start_tuning", {"goal": GOAL, "grace_s": 1e9}, "grace_s"),
    (
        "start_tuning: twin_profile /etc/passwd",
        "start_tuning",
        {"goal": GOAL, "twin_profile": "/etc/passwd"},
        "twin_profile",
    ),
    ("get_tuning: no such run", "get_tuning", {"run_id": "tune-nope"}, "run_id"),
    ("get_benchmark: wait_s 1e9", "get_benchmark", {"benchmark_id": "bm-x", "wait_s": 1e9}, "wait_s"),
    ("teardown: no such deployment", "teardown", {"deployment_id": "wt-nope", "confirm": True}, "deployment_id"),
    ("compare_results: 100000 ids", "compare_results", {"benchmark_ids": ["bm-x"] * 100_000}, "benchmark_ids"),
    ("plan_capacity: shape storm", "plan_capacity", {"shape": "storm"}, "shape"),
    (
        "plan_capacity: rate 1e308",
        "plan_capacity",
        {"shape": "poisson", "rate_per_hour": 1e308, "e2e_bound_s": 600},
        "rate_per_hour",
    ),
    (
        "heartbeat_run: hold_hours 1e6",
        "heartbeat_run",
        {"run_id": "tune-x", "detach": True, "hold_hours": 1e6},
        "hold_hours",
    ),
]


def one_line(text: str) -> bool:
    """A reason a person reads at once: no traceback, at most 600 characters on at most 4 lines (a goal's
    questions are one per line; a terminal may wrap a long line)."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return 0 < len(lines) <= 4 and len(text) <= 600 and "Traceback" not in text


def reason_of(stdout: str, stderr: str) -> str:
    """What the command said as its refusal: --json's `reason`, else from stderr's `error:` on (progress lines
    before it are the run's, not the reason), else everything it printed."""
    try:
        data = json.loads(stdout)
        if isinstance(data, dict) and isinstance(data.get("reason"), str):
            return str(data["reason"])
    except ValueError:
        pass
    at = stderr.find("error:")
    return stderr[at:] if at >= 0 else stdout + stderr


def started(db: Path) -> int:
    """Runs, benchmarks and deployments in the case's database (0 when it was never made)."""
    if not db.exists():
        return 0
    with sqlite3.connect(db) as con:
        total = 0
        for table in ("runs", "benchmarks", "deployments"):
            with contextlib.suppress(sqlite3.OperationalError):  # a table not made yet
                total += con.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
    return int(total)


def listing(folder: Path) -> set[str]:
    try:
        return {p.name for p in folder.iterdir()}
    except OSError:
        return set()


@contextmanager
def case_folder() -> Iterator[tuple[Path, Path]]:
    with tempfile.TemporaryDirectory(prefix="worldtune-hostile-") as name:
        tmp = Path(name)
        (tmp / "d").mkdir()
        (tmp / "secret.txt").write_text(f"{SECRET}\nroot:x:0:0::/root:/bin/bash\n")
        yield tmp, tmp / "wt.db"


def fill(arg: str, tmp: Path) -> str:
    return arg.replace("{tmp}", str(tmp)).replace("{dir}", str(tmp / "d")).replace("{secret}", str(tmp / "secret.txt"))


def cli_case(name: str, args: list[str], field: str) -> dict[str, Any]:
    before = listing(Path("/etc")) | {f"sys:{n}" for n in listing(Path("/sys"))}
    with case_folder() as (tmp, db):
        env = {**os.environ, "WORLDTUNE_DB": str(db), "SKYPILOT_DISABLE_USAGE_COLLECTION": "1"}
        env.pop("WORLDTUNE_MCP_TOKEN", None)
        began = time.monotonic()
        try:
            done = subprocess.run([WORLDTUNE, *[fill(a, tmp) for a in args]], capture_output=True, text=True,
                                  timeout=120, cwd=tmp, env=env, stdin=subprocess.DEVNULL)  # fmt: skip
            said, code = reason_of(done.stdout, done.stderr), done.returncode
            said += "\n[traceback]" if "Traceback" in done.stdout + done.stderr else ""
            said += "\n[secret echoed]" if SECRET in done.stdout + done.stderr else ""
        except subprocess.TimeoutExpired:
            said, code = "timed out after 120 s", -1
        extra = listing(tmp) - {"d", "secret.txt", "wt.db", "wt.db-wal", "wt.db-shm", "wt-checkpoints.sqlite",
                                "wt-checkpoints.sqlite-wal", "wt-checkpoints.sqlite-shm"}  # fmt: skip
        extra |= {f"d/{n}" for n in listing(tmp / "d")}
        secret_intact = (tmp / "secret.txt").read_text().startswith(SECRET)
        count = started(db)
    after = listing(Path("/etc")) | {f"sys:{n}" for n in listing(Path("/sys"))}
    return verdict("cli", name, field, code == 2, said, sorted(extra | (after - before)), count, secret_intact,
                   time.monotonic() - began)  # fmt: skip


def verdict(kind: str, name: str, field: str, refused: bool, said: str, created: list[str], count: int,
            secret_intact: bool, seconds: float) -> dict[str, Any]:  # fmt: skip
    return {
        "kind": kind, "case": name, "refused": refused, "one_line": one_line(said),
        "names_field": field.lower() in said.lower(), "traceback": "Traceback" in said or "[traceback]" in said,
        "echoed_secret": SECRET in said or "[secret echoed]" in said, "created": created, "started": count,
        "secret_intact": secret_intact,
        "seconds": round(seconds, 2), "said": said.strip()[:400],
    }  # fmt: skip


def mcp_cases() -> list[dict[str, Any]]:
    import anyio
    from mcp import Client

    from worldtune.agent.tuner import AgentTuner
    from worldtune.tools.mcp.server import build_server

    rows: list[dict[str, Any]] = []

    async def main() -> None:
        for name, tool, arguments, field in MCP_CASES:
            with case_folder() as (tmp, db):
                began = time.monotonic()
                async with Client(build_server(str(db), origin="mcp-local", tuner=AgentTuner())) as client:
                    result = await client.call_tool(tool, arguments)
                said = " ".join(getattr(c, "text", "") for c in result.content)
                extra = listing(tmp) - {"d", "secret.txt", "wt.db", "wt.db-wal", "wt.db-shm"}
                rows.append(verdict("mcp", name, field, bool(result.is_error), said, sorted(extra), started(db),
                                    (tmp / "secret.txt").read_text().startswith(SECRET),
                                    time.monotonic() - began))  # fmt: skip

    anyio.run(main)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "hostile_inputs.json"))
    args = parser.parse_args()
    rows = [cli_case(*case) for case in CLI_CASES] + mcp_cases()
    clean = [r for r in rows if r["refused"] and r["one_line"] and r["names_field"] and not r["traceback"]
             and not r["echoed_secret"] and not r["created"] and not r["started"] and r["secret_intact"]]  # fmt: skip
    totals = {
        "cases": len(rows), "cli": sum(r["kind"] == "cli" for r in rows), "mcp": sum(r["kind"] == "mcp" for r in rows),
        "refused": sum(r["refused"] for r in rows), "one_line_naming_field": sum(r["one_line"] and r["names_field"]
                                                                               for r in rows),
        "tracebacks": sum(r["traceback"] for r in rows), "echoed_secret": sum(r["echoed_secret"] for r in rows),
        "files_created": sum(bool(r["created"]) for r in rows), "started": sum(r["started"] for r in rows),
        "clean": len(clean),
    }  # fmt: skip
    print(f"{'kind':<4} {'case':<44} {'refused':>7} {'1 line':>6} {'field':>5} {'tb':>3} {'files':>5} {'started':>7}")
    for r in rows:
        print(f"{r['kind']:<4} {r['case'][:44]:<44} {r['refused']!s:>7} {r['one_line']!s:>6} "
              f"{r['names_field']!s:>5} {int(r['traceback']):>3} {len(r['created']):>5} {r['started']:>7}")  # fmt: skip
    print(
        f"\n{totals['cases']} hostile inputs ({totals['cli']} CLI, {totals['mcp']} MCP): refused {totals['refused']}, "
        f"one line naming the field {totals['one_line_naming_field']}, tracebacks {totals['tracebacks']}, secret "
        f"echoed {totals['echoed_secret']}, files created {totals['files_created']}, runs/benchmarks/deployments "
        f"started {totals['started']}; clean on every count: {totals['clean']}/{totals['cases']} "
        f"({100 * totals['clean'] / len(rows):.1f}%)"
    )
    for r in rows:
        if r not in clean:
            print(f"  not clean: {r['kind']} {r['case']}: {r['said'][:300]!r}")
    report = {
        "what": "hostile inputs over the CLI and MCP (issue 36): refused in one line naming the field, nothing "
        "started, created or echoed",
        "measured": "exit codes, printed text, files and database rows of each case (counts; nothing simulated)",
        "totals": totals,
        "rows": rows,
    }
    Path(args.out).write_text(json.dumps(stamped(report), indent=2) + "\n")
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
