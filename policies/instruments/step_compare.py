"""The generator step beside the model: each measured plan's per-step against perf_model.step_breakdown with a
measured profile, the published 8-GPU cells, and the micro-benchmark's bandwidth at the same per-layer sizes.

Runs here (needs worldtune): it reads the raw files generator_step.py wrote on the GPU node.
benchmarks/generator_step.py --compare prints it as a table and saves it.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from worldtune.policies import gpu_calibration, perf_model
from worldtune.tools.words.models import get_model
from worldtune.tools.words.plan import Plan
from worldtune.tools.words.profile import Profile
from worldtune.tools.words.workload import anchor_workload

from .generator_step import RAW_FORMAT, own_comm

PLANS_8GPU = (Plan(cfg=2, ulysses=4, hsdp=8), Plan(tp=8))  # the published 8xH200 plans (REFERENCE.md section 5)


MICROBENCH_CASES = {  # kind of collective in the step -> the microbench's per-layer cases of that scheme
    "ulysses_a2a": ("a2a-u{degree}-qkv", "a2a-u{degree}-out"),
    "tp_allreduce": ("allreduce-sp1",),
    "hsdp_allgather": ("allgather-hsdp-bf16",),
    "cfg_allgather": ("allgather-cfg",),
}
DEGREE = {"ulysses_a2a": "ulysses", "tp_allreduce": "tp", "hsdp_allgather": "hsdp", "cfg_allgather": "cfg"}


def isolated_busbw(microbench: dict[str, Any] | None, kind: str, degree: int) -> float | None:
    """The bus bandwidth the micro-benchmark measured for this kind's per-layer cases in groups of `degree` ranks."""
    if microbench is None or kind not in MICROBENCH_CASES:
        return None
    cases: list[dict[str, Any]] = []
    if int(microbench["hardware"].get("world", 1)) == degree:
        cases += microbench.get("collectives", [])
    for block in microbench.get("collectives_groups", []):
        if block["group_size"] == degree:
            cases += block["cases"]
    names = {name.format(degree=degree) for name in MICROBENCH_CASES[kind]}
    rates = [c["busbw_gbps"] for c in cases if c["name"] in names]
    return statistics.median(rates) if rates else None


def comparison_rows(
    raws: list[dict[str, Any]], profile_path: Path, microbench: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Each measured plan next to the model's per-step with the profile; the published 8-GPU plans beside them."""
    profile = Profile.load(profile_path)
    wl = anchor_workload()
    spec = get_model(wl.model)
    published: dict[str, float] = {}
    for row in gpu_calibration.compare_published(profile):
        plan_name = row["cell"].split()[1]
        if row["published_step_s"] is not None:
            published.setdefault(plan_name, row["published_step_s"])

    def model(plan: Plan) -> dict[str, Any]:
        step = perf_model.step_breakdown(spec, wl, plan, profile)
        return {
            "model_per_step_s": step.total_s,
            "model_compute_comm_s": step.total_s - step.overhead_s,
            "model_comm_s": step.comm_s,
            "model_breakdown": step.model_dump(),
        }

    rows = []
    for raw in raws:
        hw = raw["hardware"]
        for entry in raw["plans"]:
            plan = Plan.parse(entry["plan"])
            plan_name = str(plan)
            predicted = model(plan)
            comm = own_comm(entry["ranks"])
            toy = bool(raw.get("tiny")) or hw.get("device_type") != "cuda"  # exercises the code, measures nothing
            # the HSDP gather runs on a side stream under the compute; the others stop the step while they run
            comm_scaled = sum(c["ms_per_step"] for k, c in comm.items() if k != "hsdp_allgather")
            rows.append(
                {
                    "plan": plan_name,
                    "world": entry["world"],
                    "gpu": hw.get("gpu_name"),
                    "toy": toy,
                    "date": raw["date"],
                    "layers": entry["layers"],
                    "measured_step_ms_at_layers": entry["step_ms"],
                    "measured_per_step_s": entry["per_step_s_scaled"],
                    "measured_exposed_comm_s": comm_scaled * 1e-3 * raw["model_layers"] / entry["layers"],
                    "measured_busbw_gbps": {k: round(c["busbw_gbps"], 1) for k, c in comm.items()},
                    "isolated_busbw_gbps": {
                        k: isolated_busbw(microbench, k, getattr(plan, DEGREE[k])) for k in comm if k in DEGREE
                    },
                    "output_finite": entry.get("output_finite"),
                    **predicted,
                    "model_rel_error": None
                    if toy
                    else predicted["model_compute_comm_s"] / entry["per_step_s_scaled"] - 1,
                    "published_per_step_s": published.get(plan_name) if entry["world"] == 8 else None,
                    "check_rel_err": entry.get("check_rel_err"),
                    "peak_memory_gib": max((r.get("peak_memory_gib", 0.0) for r in entry["ranks"]), default=0.0),
                }
            )
    ran = {(r["plan"], r["world"]) for r in rows if not r["toy"]}
    not_run = [
        {
            "plan": str(p),
            "world": 8,
            **model(p),
            "published_per_step_s": published.get(str(p)),
            "measured_per_step_s": None,
        }
        for p in PLANS_8GPU
        if (str(p), 8) not in ran
    ]
    return {"profile": str(profile_path.name), "profile_source": profile.source, "rows": rows, "not_run": not_run}


def load_raws(paths: list[str]) -> list[dict[str, Any]]:
    """generator_step.py's raw files; anything else is refused by name."""
    raws = []
    for path in paths:
        raw = json.loads(Path(path).read_text())
        if raw.get("format") != RAW_FORMAT:
            raise SystemExit(f"{path}: not a generator-step raw file (format {raw.get('format')!r})")
        raws.append(raw)
    return raws
