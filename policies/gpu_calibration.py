"""Turns the GPU micro-benchmarks' raw JSON into a Profile, and compares it with the published cells.

policies/instruments/microbench.py writes the raw file on the GPU node (pure torch); this side fits, with
policies.calibration_fit.fit_profile, the effective linear and attention rates and the size at which they
halve (half_rate_tokens) to the token sweep, and reads the collectives' bus bandwidths and per-call
latency off the per-layer message sizes of the Ulysses, TP and HSDP schemes. Fields the micro-benchmarks
do not measure (fixed part, load, memory, overlaps) are kept from the shipped profile of that GPU type and
listed in `assumed`; `source` names what was measured.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from worldtune.policies import perf_model
from worldtune.policies.calibration import cell_plan, load_published, shipped_profile
from worldtune.policies.calibration_fit import Prior, RateObs, fit_profile, on_clock
from worldtune.policies.instruments.microbench import RAW_FORMAT
from worldtune.policies.instruments.shapes import SP_DEGREES
from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.gpus import get_gpu
from worldtune.tools.words.models import get_model
from worldtune.tools.words.plan import Plan
from worldtune.tools.words.profile import Profile
from worldtune.tools.words.workload import anchor_workload

COMPUTE_FIELDS = ("linear_tflops", "attn_tflops", "half_rate_tokens")
COLLECTIVE_FIELDS = ("a2a_gbps", "allreduce_gbps", "allgather_gbps", "link_gbps", "collective_latency_us")
FIT_OPS = {"linear": "linear", "attention": "attention", "attention_ulysses": "attention"}
# Relative spread given to each rate: the sizes real plans run at (T/8 .. T tokens per GPU on 1-8 GPUs) carry
# the fit; smaller ones (short, low-resolution clips) shape the fall-off. One half_rate_tokens serves both ops,
# so a tight fit everywhere is impossible (the measured curves are not monotone: tile effects of a few %).
RATE_SIGMA_PLAN_SIZES = 0.015
RATE_SIGMA_SMALL = 0.06
LATENCY_DOMINATED = 3.0  # a collective slower than this many latencies is a bandwidth reading


def load_raw(path: str | Path) -> dict[str, Any]:
    """Read a raw micro-benchmark file; anything else is a clear error."""
    file = Path(path)
    if not file.is_file():
        raise InvalidInput("raw", str(path), "a raw JSON file written by policies/instruments/microbench.py --out")
    try:
        data = json.loads(file.read_text())
    except json.JSONDecodeError as exc:
        raise InvalidInput("raw", str(path), "valid JSON", str(exc)) from exc
    if not isinstance(data, dict) or data.get("format") != RAW_FORMAT:
        raise InvalidInput("raw", str(path), f"a file whose format is {RAW_FORMAT!r}")
    if not any(op.get("op") == "linear" for op in data.get("ops", [])):
        raise InvalidInput("raw", str(path), "a run with the linear and attention sweeps (the run stopped early?)")
    return data


def world(raw: dict[str, Any]) -> int:
    return int(raw["hardware"].get("world", 1))


def is_toy(raw: dict[str, Any]) -> bool:
    """A --tiny or CPU run: it exercises the code, it calibrates nothing."""
    return bool(raw.get("tiny")) or raw["hardware"].get("device_type") != "cuda"


def rate_observations(raw: dict[str, Any]) -> list[RateObs]:
    """Linear sweep, attention sweep and Ulysses attention shapes as RateObs at their per-GPU token counts."""
    plan_sizes = int(raw["sizes"]["video_tokens"]) / max(SP_DEGREES)
    out = []
    for op in raw["ops"]:
        kind = FIT_OPS.get(op.get("op", ""))
        if kind is None or "error" in op or (op["op"] == "linear" and op.get("tp", 1) != 1):
            continue
        sigma = RATE_SIGMA_PLAN_SIZES if op["tokens"] >= plan_sizes else RATE_SIGMA_SMALL
        out.append(RateObs(kind, float(op["tflops"]), int(op["tokens"]), sigma, op["name"]))
    return out


def _op(raw: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((op for op in raw["ops"] if op.get("name") == name and "error" not in op), None)


def collective_fit(raw: dict[str, Any]) -> dict[str, Any]:
    """Per-call latency (small-message probe) and bus bandwidth per collective at the schemes' per-layer sizes."""
    cases = raw.get("collectives", [])
    probes = [c["median_ms"] * 1e3 for c in cases if c["scheme"] == "latency probe"]
    if not probes:
        raise InvalidInput("raw", "collectives", "a run on 2+ GPUs (--world 2 or more) with the latency probe")
    latency_us = statistics.median(probes)
    out: dict[str, Any] = {"collective_latency_us": latency_us, "world": world(raw), "cases": []}
    for collective in ("a2a", "allreduce", "allgather"):
        rows = [
            {
                "name": c["name"],
                "scheme": c["scheme"],
                "mb": c["buffer_bytes"] / 1e6,
                "time_us": c["median_ms"] * 1e3,
                "bus_bytes": c["bus_bytes"],
            }
            for c in cases
            if c["collective"] == collective and c["scheme"] not in ("latency probe", "size sweep")
        ]
        if not rows:
            raise InvalidInput("raw", "collectives", f"{collective} timings at the schemes' per-layer sizes")
        readings = []
        for row in rows:
            if row["time_us"] > LATENCY_DOMINATED * latency_us:
                row["busbw_gbps"] = row["bus_bytes"] / ((row["time_us"] - latency_us) * 1e-6) / 1e9
                readings.append(row["busbw_gbps"])
        if not readings:  # every size latency-bound (toy runs): a lower bound, said so
            readings = [row["bus_bytes"] / (row["time_us"] * 1e-6) / 1e9 for row in rows]
            out.setdefault("notes", []).append(f"{collective}: every size latency-bound; bandwidth is a lower bound")
        out["cases"] += rows
        out[f"{collective}_gbps"] = statistics.median(readings)
    out["link_gbps"] = statistics.median([out["a2a_gbps"], out["allreduce_gbps"], out["allgather_gbps"]])
    return out


def hardware_line(raw: dict[str, Any]) -> str:
    hw = raw["hardware"]
    if hw.get("device_type") != "cuda":
        return f"CPU toy run ({hw.get('host_cpu', '?')}, torch {hw.get('torch', '?')})"
    count = hw.get("gpu_count", 1) if world(raw) > 1 else 1
    return (
        f"{count}x {hw.get('gpu_name')} ({hw.get('gpu_memory_gib')} GiB, {hw.get('sm_count')} SMs), driver "
        f"{hw.get('driver', '?')}, torch {hw.get('torch')}, CUDA {hw.get('cuda')}, cuDNN {hw.get('cudnn')}, NCCL "
        f"{hw.get('nccl')}, SDPA backend {raw.get('attention_backend', '?')}, NVLS off: "
        f"{hw.get('nccl_env', {}).get('NCCL_NVLS_ENABLE') == '0'}"
    )


def measured_profile(raw: dict[str, Any], gpu: str, base: Profile | None = None, raw_name: str = "") -> Profile:
    """A Profile of `gpu` whose compute (and, from 2+ GPUs, collective) numbers come from the raw file."""
    spec = get_gpu(gpu)
    measured_name = str(raw["hardware"].get("gpu_name", ""))
    if not is_toy(raw) and spec.name.lower() not in measured_name.lower():
        raise InvalidInput("gpu", gpu, f"the GPU the raw file was measured on ({measured_name})", "pass --gpu to match")
    base = base or shipped_profile(spec.name)
    priors = {
        "linear_tflops": Prior(base.linear_tflops, 1.0),
        "attn_tflops": Prior(base.attn_tflops, 1.0),
        "half_rate_tokens": Prior(max(base.half_rate_tokens, 1.0), 3.0),
    }
    observations = rate_observations(raw)
    measured = list(COMPUTE_FIELDS)
    changes: dict[str, Any] = {}
    collectives: dict[str, Any] = {}
    if world(raw) > 1 and raw.get("collectives"):
        collectives = collective_fit(raw)
        changes.update({k: round(collectives[k], 2) for k in COLLECTIVE_FIELDS})
        measured += COLLECTIVE_FIELDS
    date = str(raw["date"])[:10]
    what = f"{world(raw)} CPU process(es)" if is_toy(raw) else f"{world(raw)} GPU{'s' if world(raw) > 1 else ''}"
    source = (
        f"measured by `worldtune calibrate` (policies/instruments/microbench.py) on {what}, {date}: "
        f"{', '.join(measured)}; other fields from the shipped {spec.name} profile ({base.source})"
    )
    if is_toy(raw):
        source = "TOY RUN (--tiny and/or CPU): exercises the code path only, calibrates nothing; " + source
    fitted = fit_profile(base, observations, priors, source)
    kept = [f for f in Profile.model_fields if f not in (*measured, "gpu", "source", "date", "hardware", "fit")]
    if world(raw) == 1:
        kept_note = "collectives (a2a/allreduce/allgather/link_gbps, collective_latency_us) from the shipped profile"
    else:
        kept_note = f"collective bandwidths measured on {world(raw)} GPUs, not on the plan's full node"
    assumed = [*base.assumed, kept_note, "fixed part, load and memory terms from the shipped profile"]
    fit = {
        **fitted.fit,
        "raw": raw_name,
        "measured_fields": measured,
        "kept_from_shipped": kept,
        "attention_backend": raw.get("attention_backend"),
    }
    if collectives:
        fit["collectives"] = collectives
    rounded = {k: round(float(getattr(fitted, k)), 3) for k in COMPUTE_FIELDS}
    return fitted.model_copy(
        update={
            **changes,
            **rounded,
            "date": date,
            "hardware": hardware_line(raw),
            "assumed": list(dict.fromkeys(assumed)),
            "fit": fit,
        }
    )


def with_mechanisms(profile: Profile, mech: dict[str, Any], mech_name: str) -> Profile:
    """The profile with the mechanism terms a mechbench.py file measures (ring, Ulysses packing, FP8, VAE
    tiles), each with its basis; a toy run's terms are recorded but say so in their basis."""
    from worldtune.policies import mech_terms
    from worldtune.tools.words.profile import ParamBasis

    terms = mech_terms.terms_of(mech, mech_name)
    toy = "TOY RUN, calibrates nothing: " if mech.get("tiny") or mech.get("gpu_name") == "cpu" else ""
    basis = dict(profile.basis)
    changes: dict[str, Any] = {}
    for name, term in terms.items():
        if name == "vae_decode_s":  # a stand-in decoder's seconds: the fixed part stays the shipped fit's
            continue
        changes[name] = round(term.value, 4)
        basis[name] = ParamBasis(kind="measured", source=toy + term.source, sigma=round(term.sigma, 4))
    return profile.model_copy(update={**changes, "basis": basis, "fit": {**profile.fit, "mechanisms": mech_name}})


def profile_name(raw: dict[str, Any], gpu: str) -> str:
    """File stem for a measured profile: GPU, GPU count and date, e.g. H200-1gpu-2026-11-29."""
    suffix = "-toy" if is_toy(raw) else ""
    return f"{get_gpu(gpu).name}-{world(raw)}gpu-{str(raw['date'])[:10]}{suffix}"


# ---- comparison -------------------------------------------------------------------------------------------
def floor_step_s(gpu: str) -> float | None:
    """Per-step time of the published single-operation floor (REFERENCE.md section 5: 23.3 s on one H200)."""
    floors = {
        f["op"]: f
        for f in load_published()["floors"]
        if f["gpu"] == get_gpu(gpu).name and str(f.get("source", "")).startswith("REFERENCE")
    }
    if "linear" not in floors or "attention" not in floors:
        return None
    wl = anchor_workload()
    g = get_model(wl.model).generator
    tokens, keys = wl.video_tokens, wl.video_tokens + wl.prompt_tokens
    linear = 2.0 * tokens * g.params_per_layer / (float(floors["linear"]["tflops"]) * 1e12)
    attention = 4.0 * tokens * keys * g.q_heads * g.head_dim / (float(floors["attention"]["tflops"]) * 1e12)
    return (linear + attention) * g.layers * wl.cfg_branches


def measured_step_s(raw: dict[str, Any]) -> dict[str, float] | None:
    """Single-GPU per-step straight from the anchor-size timings: (linear + attention) x layers x CFG branches."""
    t = int(raw["sizes"]["video_tokens"])
    linear, attention = _op(raw, f"linear-t{t}"), _op(raw, f"attention-t{t}")
    if linear is None or attention is None:
        return None
    scale = int(raw["sizes"]["layers"]) * anchor_workload().cfg_branches / 1e3
    return {
        "linear_ms": linear["median_ms"],
        "attention_ms": attention["median_ms"],
        "per_step_s": (linear["median_ms"] + attention["median_ms"]) * scale,
    }


def compare_published(profile: Profile) -> list[dict[str, Any]]:
    """The model with `profile` against every published cell of its GPU type (latency and per-step)."""
    data = load_published()
    cells = [c for c in data["cells"] if c["gpu"] == profile.gpu]
    rows = []
    for cell in cells:
        wl = anchor_workload(steps=cell["steps"])
        prediction = perf_model.predict(wl, cell_plan(cell), profile)
        same = {c["steps"]: c["latency_s"] for c in cells if c["plan"] == cell["plan"]}
        published_step = None
        if len(same) >= 2:
            (s1, l1), (s2, l2) = sorted(same.items())[:2]
            published_step = (l2 - l1) / (s2 - s1)
        predicted = on_clock(prediction, cell["clock"])  # the cell's own clock: server stage or a client's wall
        rows.append(
            {
                "cell": f"{cell['gpu']} {cell['plan']} {cell['steps']} steps",
                "clock": cell["clock"],
                "published_s": cell["latency_s"],
                "predicted_s": round(predicted, 2),
                "rel_error": round(predicted / cell["latency_s"] - 1, 4),
                "published_step_s": None if published_step is None else round(published_step, 4),
                "predicted_step_s": round(prediction.per_step_s, 4),
                "step_rel_error": None
                if published_step is None
                else round(prediction.per_step_s / published_step - 1, 4),
            }
        )
    return rows


def single_gpu_step(profile: Profile) -> dict[str, float]:
    """The model's per-step on one GPU (no parallelism) with `profile`: compute, and with overhead."""
    wl = anchor_workload()
    step = perf_model.step_breakdown(get_model(wl.model), wl, Plan(), profile)
    return {"compute_s": step.compute_s, "per_step_s": step.total_s}


def comparison(profile: Profile, raw: dict[str, Any] | None = None) -> dict[str, Any]:
    """Everything the closing note needs: rates, single-GPU per-step vs the floor, published cells."""
    out: dict[str, Any] = {
        "gpu": profile.gpu,
        "source": profile.source,
        "hardware": profile.hardware,
        "rates": {k: getattr(profile, k) for k in (*COMPUTE_FIELDS, *COLLECTIVE_FIELDS)},
        "model_single_gpu_step": single_gpu_step(profile),
        "floor_step_s": floor_step_s(profile.gpu),
        "cells": compare_published(profile),
    }
    if raw is not None:
        out["measured_single_gpu_step"] = measured_step_s(raw)
    return out
