"""Random MCP tool calls and the properties every answer must keep (shared by the hypothesis test and the benchmark).

Not a test module. `call_strategy()` draws one tool call from a pool that mixes valid values with
hostile ones (planted secret files, /proc paths, over-long strings, non-ASCII, wrong types, "yes" for
a boolean, huge and negative numbers, `local/x` infras). `run_calls()` plays a sequence of them against a
fresh in-process server (the SDK's own Client) over its own database, with tests/fake_cloud.py standing
in for SkyPilot (no cloud can be reached here), and checks after every call:

- nothing starts unconfirmed: a call without confirm=true adds no ledger row, no deployment row, no
  launch and no child process, and stops nothing;
- nothing commits more than the caps: per run and for everything live, within the guardrails;
- nothing leaks: the planted secret marker never appears in an answer;
- every refusal is clear: it names the field, the value and what would be valid (worldtune's
  "field=value is not valid: ..." or pydantic's per-field "input_value=" block).

The local twin is left out of the draws on purpose: it starts real processes without confirmation by
design (it is free), and its round trip is tested in tests/integration.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from hypothesis import strategies as st
from mcp import Client

SECRET = "SECRET-MARKER-c0ffee42"
CAP_RUN, CAP_LIVE = 300.0, 300.0  # policies/guardrails.yaml's max_usd_per_run and max_usd_committed
LIVE = ("pending", "provisioning", "loading", "ready")
LIVE_ID = "@live"  # replaced at call time by the id of a deployment the sequence has up (replan_deployment)
FUZZED_TOOLS = ("provision", "deploy", "teardown", "estimate", "validate_plan", "list_plans", "list_offers",
                "start_benchmark", "get_deployment", "list_deployments", "replan_deployment",
                "plan_capacity")  # fmt: skip
OURS = re.compile(r"[\w./\[\]-]+=.{0,2000}? is not valid: \S", re.DOTALL)
PYDANTIC = re.compile(r"validation errors? for \w+\n\S+\n  .+\[type=\w+, input_value=")


def plant_secrets(folder: Path) -> list[str]:
    """Files holding the secret marker that fuzzed paths point at; returns their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "token.yaml": f"token: {SECRET}\n",
        "secret-key.yaml": f"{SECRET}: 1\n",
        "broken.yaml": f"gpu: [H200\n {SECRET}\n",
        "shadow": f"root:{SECRET}:19000::::::\n",
    }
    for name, text in files.items():
        (folder / name).write_text(text)
    return [str(folder / name) for name in files]


def _strings(secrets: list[str]) -> st.SearchStrategy[Any]:
    pool = ["H200", "B200", "h200", "A100", "cfg2-u4-hsdp8", "tp8", "1gpu", "2xtp4", "tp3", "nebius",
            "nebius/eu-north1", "aws", "lambda", "azure", "local", "local/x", "slurm", "slurm/gpus",
            "slurm/worldtune-local", "kubernetes", "moon", "", " ", "spot", "on-demand", "serverless", "twin",
            "vllm-omni", "cosmos3-super", "cosmos3-nano", "run-R", "wt-00000000", "/etc/shadow", "/etc/passwd",
            "/proc/self/environ", "/dev/zero", "/tmp", "../../etc/passwd", "H200.yaml", "x" * 5000,
            "日本語🎥", "a\u0000b", "832x480", "1280x720"]  # fmt: skip
    return st.one_of(st.sampled_from(pool + secrets), st.text(max_size=30))


def _values(secrets: list[str]) -> st.SearchStrategy[Any]:
    numbers = st.one_of(st.integers(-(2**70), 2**70), st.floats(allow_nan=False, allow_infinity=False),
                        st.sampled_from([0, 1, 3.2, 8, 100, 720, 1e308, -1, 2**63]))  # fmt: skip
    scalars = st.one_of(_strings(secrets), numbers, st.booleans(), st.none(), st.sampled_from(["yes", "on", "1"]))
    return st.one_of(scalars, st.lists(scalars, max_size=3), st.dictionaries(st.text(max_size=5), scalars, max_size=2))


ARGUMENTS: dict[str, tuple[str, ...]] = {
    "provision": ("gpu", "plan", "infra", "capacity", "model", "hours", "run_id", "confirm", "usd_per_hour"),
    "deploy": ("gpu", "plan", "infra", "engine", "capacity", "model", "twin_profile", "time_scale", "hours", "run_id",
               "confirm", "usd_per_hour"),
    "teardown": ("deployment_id", "confirm"),
    "estimate": ("plan", "model", "gpu", "steps", "capacity", "profile"),
    "validate_plan": ("plan", "model", "gpu", "gpus", "steps", "profile"),
    "list_plans": ("model", "gpu", "gpus", "steps", "capacity", "profile", "latency_bound_s", "limit"),
    "list_offers": ("gpu", "gpus", "infra", "capacity", "source"),
    "start_benchmark": ("deployment_id", "steps", "repeats", "seed", "flow_shift", "size", "num_frames", "fps",
                        "guidance_scale", "wait"),
    "get_deployment": ("deployment_id",),
    "list_deployments": ("run_id", "alive_only"),
    "replan_deployment": ("deployment_id", "plan", "confirm", "hours"),
    "plan_capacity": ("shape", "e2e_bound_s", "e2e_percentile", "rate_per_hour", "clips_per_day", "window_start_h",
                      "window_end_h", "burst_size", "burst_every_s", "trace", "model", "capacities",
                      "max_gpus_per_node", "preemptions_per_node_hour"),
}  # fmt: skip


# Plausible values per parameter (some valid, some refused by a rule): most draws use these, so calls get
# past the schema and reach the capabilities' own checks and the guardrails.
PLAUSIBLE: dict[str, list[Any]] = {
    "gpu": ["H200", "B200", "H200", "A100"],
    "plan": ["cfg2-u4-hsdp8", "tp8", "1gpu", "2xtp4", "8x1gpu", "tp3"],
    "infra": [
        "nebius",
        "nebius/eu-north1",
        "aws",
        "lambda",
        "slurm/gpus",
        "slurm/worldtune-local",
        "kubernetes",
        "local/x",
        "azure",
        "local",
    ],
    "capacity": ["on-demand", "spot", "on-demand", "serverless"],
    "model": ["cosmos3-super", "cosmos3-nano"],
    "engine": ["vllm-omni", "twin"],
    "hours": [0.25, 1.0, 3.2, 8.0, 9.0, 0.0],
    "run_id": ["run-A", "run-B", None],
    "usd_per_hour": [10.0, 40.0, 0.0],
    "time_scale": [1.0, 100.0],
    "profile": ["H200", "B200", "/etc/shadow", "/proc/self/environ"],
    "twin_profile": [None, "H200", "/etc/shadow"],
    "steps": [35, 4, 0, 300],
    "gpus": [8, 4, 1, 9],
    "seed": [17, 2**64, -(2**63)],
    "flow_shift": [10.0, 1e9, 0.0],
    "size": ["832x480", "1280x720", "1x1"],
    "num_frames": [121, 189, 1000],
    "fps": [24, 7],
    "guidance_scale": [6.0, 50.0],
    "repeats": [1, 3, 0],
    "latency_bound_s": [150.0, -1.0],
    "limit": [5, 0],
    "source": ["snapshot", "auto", "web"],
    "alive_only": [True, False],
    "wait": [False, True, "yes"],
    "deployment_id": ["wt-00000000", LIVE_ID],
    # plan_capacity: a valid Poisson goal half the time (a few seconds of simulated days), else a rule's refusal
    "shape": ["poisson", "daily_window", "bursts", "trace", "zigzag"],
    "e2e_bound_s": [900.0, 1.0, -5.0],
    "e2e_percentile": [95, 50, 97],
    "rate_per_hour": [20.0, 0.0, -3.0, 1e9],
    "clips_per_day": [300.0, -1.0],
    "window_start_h": [8.0, 25.0],
    "window_end_h": [20.0, 3.0],
    "burst_size": [50, 0],
    "burst_every_s": [7200.0, 0.0],
    "trace": ["/etc/passwd", "/proc/self/environ", "arrivals.csv"],
    "capacities": [["on-demand"], ["spot"], ["serverless"], []],
    "max_gpus_per_node": [8, 0, 9],
    "preemptions_per_node_hour": [0.05, -1.0, 11.0],
}
REQUIRED = {"provision": ("gpu", "plan", "infra"), "deploy": ("gpu", "plan"), "teardown": ("deployment_id",),
            "estimate": ("plan",), "validate_plan": ("plan",), "start_benchmark": ("deployment_id",),
            "get_deployment": ("deployment_id",), "replan_deployment": ("deployment_id", "plan"),
            "plan_capacity": ("shape",)}  # fmt: skip


@st.composite
def call_strategy(draw: st.DrawFn, secrets: list[str]) -> tuple[str, dict[str, Any]]:
    """One tool call: a tool, and for each parameter nothing, a plausible value, or (1 in 12) a hostile one."""
    if draw(st.integers(0, 3)) == 0:  # a well-formed confirmed rental: sequences of them run into the caps
        return "provision", {
            "gpu": draw(st.sampled_from(["H200", "B200"])), "plan": draw(st.sampled_from(["cfg2-u4-hsdp8", "tp8"])),
            "infra": draw(st.sampled_from(["nebius", "nebius/eu-north1", "aws", "lambda"])),
            "capacity": draw(st.sampled_from(["on-demand", "spot"])), "hours": draw(st.sampled_from([1.0, 3.2, 6.0])),
            "run_id": draw(st.sampled_from(["run-A", "run-B", None])), "confirm": True,
        }  # fmt: skip
    tool = draw(st.sampled_from([*FUZZED_TOOLS, *["provision", "deploy"] * 4]))  # the paid paths most often
    args: dict[str, Any] = {}
    for name in ARGUMENTS[tool]:
        kind = draw(st.integers(0, 11))
        if kind < 4 and name not in REQUIRED.get(tool, ()):
            continue
        if name == "confirm":
            args[name] = draw(st.sampled_from([True] * 6 + [False, "yes", "on", 1, "true", None]))
        elif kind == 11:
            args[name] = draw(_values(secrets))
        elif name in ("profile", "twin_profile", "trace") and kind == 10:
            args[name] = draw(st.sampled_from(secrets))
        else:
            pool = PLAUSIBLE.get(name, ["x"])
            args[name] = draw(st.sampled_from([pool[0]] * len(pool) + pool))  # the first (valid) one half the time
    if tool == "deploy" and args.get("infra") in (None, "local") and args.get("engine") in (None, "twin"):
        args["infra"] = "nebius"  # the free local twin starts processes by design: left to the integration tests
    return tool, args


@dataclass
class Tally:
    """What the fuzzing saw, and every property that broke (empty lists: none broke)."""

    calls: int = 0
    refusals: int = 0
    cap_refusals: int = 0  # refusals by a money cap (max_usd_*): the caps were reached, not only respected
    unclear: list[str] = field(default_factory=list)
    unconfirmed_starts: list[str] = field(default_factory=list)
    unconfirmed_stops: list[str] = field(default_factory=list)
    cap_breaches: list[str] = field(default_factory=list)
    leaks: list[str] = field(default_factory=list)
    launches: int = 0
    by_tool: dict[str, int] = field(default_factory=dict)
    # what the answers said was started and for how much (deployment id -> run id, quoted expected USD)
    live: dict[str, tuple[str | None, float]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"calls": self.calls, "refusals": self.refusals, "cap_refusals": self.cap_refusals,
                "refusals_without_clear_message": len(self.unclear),
                "unconfirmed_starts": len(self.unconfirmed_starts), "unconfirmed_stops": len(self.unconfirmed_stops),
                "cap_breaches": len(self.cap_breaches), "leaks": len(self.leaks), "launches": self.launches,
                "by_tool": dict(sorted(self.by_tool.items())),
                "examples": {"unclear": self.unclear[:5], "leaks": self.leaks[:5]}}  # fmt: skip

    @property
    def broken(self) -> list[str]:
        return self.unclear + self.unconfirmed_starts + self.unconfirmed_stops + self.cap_breaches + self.leaks


def _children() -> int:
    """Live child processes of this process (from /proc): a started twin or engine would show here."""
    me, count = os.getpid(), 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == me:
                count += 1
    return count


def _snapshot(store: Any) -> tuple[int, int, dict[str, str]]:
    deployments = store.list_deployments()
    return len(store.ledger()), len(deployments), {d.id: d.state for d in deployments}


def _commitment(d: Any) -> float:
    """What a deployment commits, defined here independently of tools/plans/spend.py (the code under test):
    while it lives, price x hours asked (or what it billed, if more); once gone, what it billed."""
    end = d.terminated_at or time.time()
    billed = d.usd_per_hour * max(0.0, end - d.created_at) / 3600.0
    return max(billed, getattr(d, "committed_usd", 0.0)) if d.state in LIVE else billed


def _check_answered_commitments(tally: Tally) -> None:
    """The caps over what the answers themselves said was started (independent of what the database records)."""
    total = sum(usd for _, usd in tally.live.values())
    if total > CAP_LIVE + 0.01:
        tally.cap_breaches.append(f"answers committed {total:.2f} live > {CAP_LIVE}")
    runs: dict[str, float] = {}
    for run, usd in tally.live.values():
        if run:
            runs[run] = runs.get(run, 0.0) + usd
    tally.cap_breaches += [f"answers committed {v:.2f} to {r} > {CAP_RUN}" for r, v in runs.items() if v > CAP_RUN]


def _check_caps(store: Any, tally: Tally) -> None:
    deployments = store.list_deployments()
    total = sum(_commitment(d) for d in deployments if d.state in LIVE)
    if total > CAP_LIVE + 0.01:
        tally.cap_breaches.append(f"live commitment {total:.2f} > {CAP_LIVE}")
    runs: dict[str, float] = {}
    for d in deployments:
        if d.run_id:
            runs[d.run_id] = runs.get(d.run_id, 0.0) + _commitment(d)
    tally.cap_breaches += [f"run {r} commits {usd:.2f} > {CAP_RUN}" for r, usd in runs.items() if usd > CAP_RUN + 0.01]


async def _one(client: Client, store: Any, tool: str, args: dict[str, Any], tally: Tally) -> None:
    import fake_cloud

    if args.get("deployment_id") == LIVE_ID:  # a live id for replan_deployment only; the others keep the unknown id
        live = next(iter(tally.live), "wt-00000000") if tool == "replan_deployment" else "wt-00000000"
        args = {**args, "deployment_id": live}
    before, launched = _snapshot(store), len(fake_cloud.LAUNCHED)
    children = _children()
    result = await client.call_tool(tool, args)
    text = " ".join(getattr(c, "text", "") for c in result.content)
    answer = text + json.dumps(result.structured_content or {}, default=str)
    tally.calls += 1
    tally.by_tool[tool] = tally.by_tool.get(tool, 0) + 1
    if SECRET in answer:
        tally.leaks.append(f"{tool} {args!r:.200}")
    if result.is_error:
        tally.refusals += 1
        tally.cap_refusals += "max_usd_" in text
        if not (OURS.search(text) or PYDANTIC.search(text)):
            tally.unclear.append(f"{tool}: {text[:300]}")
    after = _snapshot(store)
    tally.launches += len(fake_cloud.LAUNCHED) - launched
    confirmed = args.get("confirm") is True
    grew = after[0] > before[0] or after[1] > before[1] or len(fake_cloud.LAUNCHED) > launched
    if grew and not confirmed:
        tally.unconfirmed_starts.append(f"{tool} {args!r:.200}")
    if _children() > children:
        tally.unconfirmed_starts.append(f"{tool} started a process: {args!r:.200}")
    content = result.structured_content or {}
    if not result.is_error and content.get("done") and tool in ("provision", "deploy") and content.get("deployment"):
        tally.live[content["deployment"]["id"]] = (args.get("run_id"), float(content["quote"]["expected_usd"]))
    if not result.is_error and content.get("done") and tool == "replan_deployment" and args.get("hours") is not None:
        check = content.get("check") or {}  # a new lease: the answer says what the deployment commits now
        run = tally.live.get(str(args["deployment_id"]), (None, 0.0))[0]
        tally.live[str(args["deployment_id"])] = (run, float(check.get("committed_usd") or 0.0))
    if not result.is_error and content.get("done") and tool == "teardown":
        tally.live.pop(str(args.get("deployment_id")), None)
    _check_answered_commitments(tally)
    stopped = [i for i, s in before[2].items() if after[2].get(i) != s and after[2].get(i) == "terminated"]
    if stopped and not confirmed:
        tally.unconfirmed_stops.append(f"{tool} stopped {stopped}")
    _check_caps(store, tally)


def run_calls(calls: list[tuple[str, dict[str, Any]]], db: Path, tally: Tally) -> None:
    """Play `calls` against a fresh in-process server over `db`, checking every property after each."""
    import fake_cloud

    from worldtune.tools.mcp.server import build_server
    from worldtune.tools.store.database import Store

    tally.live = {}  # commitments are per database: a sequence starts with nothing live

    async def main() -> None:
        store = Store(db)
        async with Client(build_server(str(db), origin="mcp-http")) as client:
            for tool, args in calls:
                if tool in ("teardown", "get_deployment", "start_benchmark") and store.list_deployments():
                    # aim some calls at deployments that exist, so stopping and measuring are really tried
                    ids = [d.id for d in store.list_deployments()]
                    args = {**args, "deployment_id": ids[len(args) % len(ids)]} if len(args) % 2 else args
                await _one(client, store, tool, args, tally)

    fake_cloud.STATUS_OVERRIDE[:] = ["preempted"]
    try:
        anyio.run(main)
    finally:
        fake_cloud.STATUS_OVERRIDE.clear()
        from worldtune.tools.store.owners import HEARTBEAT

        for path, owner in HEARTBEAT.held():  # this process's heartbeat stops stamping the sequence's database,
            if Path(path) == db:  # which its caller removes next (a beat mid-removal re-created -wal files)
                HEARTBEAT.drop(Path(path), owner)
