"""Calibration: the shipped profiles, fitted to the published cells (policies/published.yaml).

Each GPU type starts from a prior profile (its datasheet, the measured mechanism terms, and for a GPU other
than the H200 the fitted H200 scaled by datasheet ratios); policies/calibration_fit.py fits its free numbers
to the published cells and floors by regularised least squares. Run as a module to rewrite the shipped
profiles.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from pathlib import Path
from typing import Any

import yaml

from worldtune.policies import families, mech_terms
from worldtune.policies.calibration_fit import (
    FIXED_SHARES,
    LatencyObs,
    Observation,
    Prior,
    RateObs,
    RatioObs,
    fit_profile,
)
from worldtune.tools.words.gpus import get_gpu
from worldtune.tools.words.plan import Plan
from worldtune.tools.words.profile import ParamBasis, Profile
from worldtune.tools.words.workload import anchor_workload

SHORT_PROMPT = "a short random prompt of about ten words here"  # the concurrency cells' random prompts
PUBLISHED_FILE = Path(__file__).parent / "published.yaml"
PROFILES_DIR = Path(__file__).parent / "profiles"


# ---- the published data ------------------------------------------------------------------------
def load_published() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(PUBLISHED_FILE.read_text())
    return data


def published_observations(gpu: str, data: dict[str, Any] | None = None) -> list[Observation]:
    """The published cells and floors of one GPU type as fit observations."""
    data = data or load_published()
    out: list[Observation] = []
    for cell in data["cells"]:
        if cell["gpu"] != gpu:
            continue
        wl = anchor_workload(steps=cell["steps"])
        label = f"{cell['gpu']} {cell['plan']} {cell['steps']} steps"
        sigma = float(cell.get("sigma", 0.01))  # relative: the spread of repeats, or the rounding of a dashboard
        reference = cell.get("relative_to")
        if reference is None:
            wall = cell.get("measure") == "wall"
            out.append(LatencyObs(wl, Plan.parse(cell["plan"]), cell["latency_s"], sigma, label, wall=wall))
            continue
        base = next(
            c for c in data["cells"] if c["gpu"] == gpu and c["plan"] == reference and c["steps"] == cell["steps"]
        )
        ratio = cell["latency_s"] / base["latency_s"]
        out.append(RatioObs(wl, Plan.parse(cell["plan"]), Plan.parse(reference), ratio, sigma, label))
    for row in data["concurrency"]:  # one client alone: its wall clock over the server stage
        if row["gpu"] == gpu and row["concurrency"] == 1:
            wl = anchor_workload(guardrails=True, prompt=SHORT_PROMPT)
            label = f"{gpu} {row['plan']} c=1 client wall"
            out.append(LatencyObs(wl, Plan.parse(row["plan"]), row["mean_latency_s"], 0.01, label, wall=True))
    for floor in data["floors"]:
        if floor["gpu"] == gpu and floor.get("fit", True):
            label = f"{gpu} {floor['op']} floor at {floor['tokens']} tokens"
            out.append(RateObs(floor["op"], floor["tflops"], floor["tokens"], 0.01, label))
    return out


def _pipelined_from_concurrency(data: dict[str, Any], gpu: str) -> float | None:
    """The part of a request that overlaps the next: latency at c=1 minus service time when queued."""
    rows = [r for r in data["concurrency"] if r["gpu"] == gpu]
    single = [r for r in rows if r["concurrency"] == 1]
    queued = [r for r in rows if r["concurrency"] > 1]
    if not single or not queued:
        return None
    service = 3600.0 / (sum(float(r["clips_per_hour"]) for r in queued) / len(queued))
    return max(0.0, float(single[0]["mean_latency_s"]) - service)


ASSUMED_NOTES = [
    "step_overhead_s",
    "hsdp_overlap",
    "ring_overlap",
    "ring_hop_latency_us",
    "fixed shares of the non-VAE fixed part (text 50%, mux 50%)",
    "guardrail_base_s",
    "guardrail_per_word_s",
    "load_base_s",
    "memory terms (fitted by hand to the 1xB200 and HSDP8 H200 peaks)",
]
LOAD_NOTE = "cold loads of tensor parallel plans (the disk read is once per node, whatever the plan)"
LOAD_TERMS = ("load_gib_per_s_warm", "load_gib_per_s_cold", "load_tp_efficiency")
H200_LOADS = {  # the published readiness figures (8xH200) the load terms reproduce
    "load_gib_per_s_warm": ParamBasis(
        kind="published",
        source="published: REFERENCE.md sections 2 and 8 (npa workbench docs): Super loads in 280-290 s with "
        "weights in page cache (HSDP, 8xH200): 40 s base + 116.6 GiB / 0.47 GiB/s = 288 s",
    ),
    "load_gib_per_s_cold": ParamBasis(
        kind="published",
        source="published: REFERENCE.md sections 2 and 8: ~610 s cold (+320 s; 592 s in one cold run): "
        "288 s + 116.6 GiB x (1/0.2 - 1/0.47) = 623 s",
    ),
    "load_tp_efficiency": ParamBasis(
        kind="published",
        source="published: REFERENCE.md section 8 (npa workbench docs): TP8 about 90 s warm on 8xH200: "
        "40 s + 116.6 GiB / (8 x 0.47 GiB/s x 0.62) = 90 s; one published point, not measured here",
        sigma=0.2,
    ),
}
FP8_ATTN = ParamBasis(
    kind="published",
    source="vLLM-Omni 0.30 quantises linear layers only; FP8 FlashAttention-3 for diffusion is 0.32 (REFERENCE s8)",
    sigma=0.02,
)


def _mechanisms(gpu: str, reference: Profile | None) -> tuple[dict[str, Any], dict[str, ParamBasis]]:
    """Mechanism terms and their basis: measured on H200 (policies/mech_terms.py); another GPU carries the
    reference's values, assumed, except where its own kernels differ (its HBM bandwidth for the copies)."""
    terms = mech_terms.h200_terms()
    values: dict[str, Any] = {name: t.value for name, t in terms.items()}
    basis = {name: ParamBasis(kind="measured", source=t.source, sigma=round(t.sigma, 4)) for name, t in terms.items()}
    values.update(ring_hop_latency_us=30.0, ring_overlap=0.8, fp8_attn_speedup=1.0)
    basis["fp8_attn_speedup"] = FP8_ATTN
    values_26, basis_26 = _tp_terms(gpu)
    values.update(values_26)
    basis.update(basis_26)
    basis["attn_fa_factor"] = ParamBasis(
        kind="measured",
        source="FLASH_ATTN (FA3, fa3-fwd 0.0.3) is vLLM-Omni 0.30's default on sm_90: attn_tflops is its rate "
        f"(the H200 floor is FA3's, {mech_terms.H200_BACKENDS.name} backend-fa3-varlen-u1)",
        sigma=0.01,
    )
    if gpu != "H200" and reference is not None:
        hbm = HBM_TBPS
        for name in ("ring_chunk_efficiency", "ring_merge_ms_per_gelem", "ulysses_pack_ms_per_gb"):
            values[name] = float(getattr(reference, name))
        for name in ("ring_merge_ms_per_gelem", "ulysses_pack_ms_per_gb"):  # memory-bound copies
            values[name] *= hbm["H200"] / hbm.get(gpu, 4.8)
        for name in ("fp8_linear_speedup", "vae_tile_fixed_share", "vae_tile_area_cost"):
            values[name] = float(getattr(reference, name))
        for name in (*terms, "fp8_linear_speedup"):
            basis[name] = ParamBasis(kind="assumed", source=f"the {reference.gpu} value ({terms[name].source})")
        basis["fp8_attn_speedup"] = FP8_ATTN
        values["attn_backend_default"] = "cudnn"  # sm_100: TRTLLM_ATTN or CUDNN_ATTN, both cuDNN/TRT class
        for name in ("attn_fa_factor", "attn_cudnn_factor", "attn_fi_factor"):
            basis[name] = ParamBasis(kind="assumed", source="no published backend cells on this GPU", sigma=0.3)
    return values, basis


HBM_TBPS = {"H200": 4.8, "B200": 8.0, "B300": 8.0, "H100": 3.35}  # datasheets (REFERENCE.md section 6)
# Public figures the TP and B200 terms rest on where nothing was measured here (no NVLink peer was lent)
NCCL_H100_ALLREDUCE = (
    "published: nccl-tests all_reduce_perf busbw at large sizes on 8xH100 SXM5, NVLink 4 only, 460-480 GB/s "
    "(docs.alayanew.com/en/docs/tech-blog/2026-05-06-nccl-tests); H200 has the same NVLink 4 and NVSwitch"
)
NVLS_NOTE = (
    "; NCCL's ring without NVLS (SHARP in the NVSwitch), which the published runs may have had on: the published "
    "TP8 cell pulls the fit above it"
)
B200_D2D = (
    "published: over 6,000 GB/s device-to-device (CUDA samples bandwidthTest) on 8xB200 HGX "
    "(newmind.ai/journal/18); the B200 datasheet's HBM3e is 8 TB/s"
)


def _tp_terms(gpu: str) -> tuple[dict[str, float], dict[str, ParamBasis]]:
    """Issue 26's terms: the non-GEMM work's HBM rate, sharded GEMMs, attention at 8 heads a GPU, the all-reduce's
    bus bandwidth. H200's measured here or published; B200's from B200 figures where they exist, else assumed."""
    shard = mech_terms.shard_and_copy_terms()
    narrow, cudnn_narrow = mech_terms.narrow_attention_pooled(), mech_terms.narrow_attention_pooled("cudnn")
    if gpu == "H200":
        terms = {**shard, "attn_narrow_factor": narrow}
        values = {name: t.value for name, t in terms.items()}
        basis = {n: ParamBasis(kind="measured", source=t.source, sigma=round(t.sigma, 4)) for n, t in terms.items()}
        values["allreduce_gbps"] = 470.0
        basis["allreduce_gbps"] = ParamBasis(kind="published", source=NCCL_H100_ALLREDUCE + NVLS_NOTE, sigma=0.1)
        return values, basis
    spec, h200 = get_gpu(gpu), get_gpu("H200")
    ratio = spec.bf16_tflops / h200.bf16_tflops
    graph_share = shard["rest_gbps"].value / shard["rest_gbps"].detail["copy"]
    loss = (1 - shard["tp_shard_efficiency"].value) * ratio  # a per-kernel cost fixed in time weighs more when faster
    values = {
        # the fused graph runs at the copy ceiling's share measured on H200 (rest over copy-hidden)
        "rest_gbps": 6000.0 * graph_share
        if gpu == "B200"
        else shard["rest_gbps"].value * HBM_TBPS.get(gpu, 4.8) / HBM_TBPS["H200"],
        "tp_shard_efficiency": max(0.5, 1 - loss),
        "attn_narrow_factor": cudnn_narrow.value,
        "allreduce_gbps": 470.0 * spec.link_gbps / h200.link_gbps,
    }
    basis = {
        "rest_gbps": ParamBasis(
            kind="published",
            source=f"{B200_D2D}; x {graph_share:.3f}, H200's fused-graph rate over its copy ceiling "
            f"({shard['rest_gbps'].source})",
            sigma=0.15,
        )
        if gpu == "B200"
        else ParamBasis(kind="assumed", source="the H200 copy ceiling scaled by the datasheets' HBM bandwidth"),
        "tp_shard_efficiency": ParamBasis(
            kind="assumed",
            source=f"the H200 shard loss ({shard['tp_shard_efficiency'].source}) x the datasheets' BF16 ratio "
            f"{ratio:.2f}: small shards' per-kernel costs are fixed in time (not measured on this GPU)",
            sigma=0.05,
        ),
        "attn_narrow_factor": ParamBasis(
            kind="assumed",
            source=f"the default backend here is cuDNN class: H200's cuDNN at 8 heads ({cudnn_narrow.source})",
            sigma=0.03,
        ),
        "allreduce_gbps": ParamBasis(
            kind="assumed",
            source=f"H200's {NCCL_H100_ALLREDUCE.removeprefix('published: ')}, x the NVLink 5 / NVLink 4 datasheet "
            "ratio (no public 8xB200 busbw figure found; an 8xB200 all-reduce was not measured)",
            sigma=0.3,
        ),
    }
    return values, basis


# Published per-step compute ratios over H200 on one engine where they exist: the whole model on one GPU, another
# engine's batch path, ~21 s/step on H200 and ~11.3 s/step on B200 (REFERENCE.md section 5). The datasheets' BF16
# ratio (2.27) is what a GPU without such a figure takes.
PUBLISHED_COMPUTE_RATIO: dict[str, float] = {}
COMPUTE_RATIO_SOURCE = (
    "published: one engine's single-GPU per-step times, ~21 s on H200 and ~11.3 s on B200 (REFERENCE.md s5)"
)


def compute_ratio(gpu: str, reference: str) -> float:
    """How many times faster `gpu` computes than `reference`: a published same-engine figure where there is one
    (over H200), else the datasheets' BF16 ratio."""
    spec, ref_spec = get_gpu(gpu), get_gpu(reference)
    if reference == "H200" and spec.name in PUBLISHED_COMPUTE_RATIO:
        return PUBLISHED_COMPUTE_RATIO[spec.name]
    return spec.bf16_tflops / ref_spec.bf16_tflops


def prior_profile(gpu: str, reference: Profile | None = None) -> tuple[Profile, dict[str, Prior]]:
    """A starting profile and priors for a GPU type, from its datasheet (and a fitted reference GPU)."""
    spec = get_gpu(gpu)
    # ~63% of datasheet BF16 is what the H200 floor measured; links ~80% of NVLink per direction.
    if reference is not None:
        ref_spec = get_gpu(reference.gpu)
        ratio = compute_ratio(gpu, reference.gpu)
        linear = reference.linear_tflops * ratio
        attention = reference.attn_tflops * ratio
        if reference.attn_backend_default == "fa" and gpu != reference.gpu:  # this GPU's default is cuDNN class
            attention *= _kernel_terms()["attn_cudnn_kernel_ratio"].value  # the cuDNN kernel's rate, not FA3's
        link = reference.link_gbps * spec.link_gbps / ref_spec.link_gbps
        other = reference.text_encode_s + reference.mux_s
        # tokens at half rate = a fixed per-operation time x the rate: the same overhead on a faster GPU costs
        # proportionally more tokens' worth of work
        half_rate = reference.half_rate_tokens * ratio
    else:
        linear = attention = 0.63 * spec.bf16_tflops
        link = 0.8 * spec.link_gbps
        other = 14.4 - 6.19  # the anchor's fixed part less the stand-in decoder's whole decode
        half_rate = 256.0
    values, basis = _mechanisms(gpu, reference)
    if reference is not None:  # a compute-bound decode: the reference's seconds over the datasheet ratio
        values["vae_decode_s"] = reference.vae_decode_s / ratio
    base = Profile(
        gpu=spec.name,
        source="prior from datasheet",
        date=date.today().isoformat(),
        linear_tflops=linear,
        attn_tflops=attention,
        half_rate_tokens=half_rate,
        link_gbps=link,
        collective_latency_us=30.0,
        text_encode_s=other * FIXED_SHARES["text_encode_s"],
        mux_s=other * FIXED_SHARES["mux_s"],
        guardrail_base_s=1.0,
        guardrail_per_word_s=0.25,
        assumed=list(ASSUMED_NOTES) + ([LOAD_NOTE] if reference is None else [*LOAD_TERMS, LOAD_NOTE]),
        basis=(H200_LOADS | basis) if reference is None else basis,
        **values,
    )
    priors = {
        "allreduce_gbps": Prior(values["allreduce_gbps"], basis["allreduce_gbps"].relative_sigma),
        "linear_tflops": Prior(linear, 0.3),
        "attn_tflops": Prior(attention, 0.3),
        "link_gbps": Prior(link, 0.5),
        "collective_latency_us": Prior(30.0, 1.0),
        "half_rate_tokens": Prior(half_rate, 1.5),
        "fixed_other_s": Prior(other, 0.5),
        "vae_decode_s": Prior(values["vae_decode_s"], 0.6 if reference is None else 0.7),
    }
    if reference is None:  # the client's overhead is read off the H200 c=1 cell; the other GPU keeps it
        priors["client_overhead_s"] = Prior(3.0, 1.0)
    else:
        base = base.model_copy(update={"client_overhead_s": reference.client_overhead_s})
        base.basis["client_overhead_s"] = ParamBasis(
            kind="assumed", source=f"the {reference.gpu} fit's (its c=1 client wall over the server stage): same client"
        )
    if reference is None:  # the published backend and ring cells are H200 cells
        # the kernels alone (FA3 as FLASH_ATTN calls it over cuDNN SDPA as CUDNN_ATTN does), wide: the published
        # whole-run gap is several times what the kernels show, and only that cell says how much more
        priors["attn_cudnn_factor"] = Prior(_kernel_terms()["attn_cudnn_kernel_ratio"].value, 0.5)
        priors["attn_fi_factor"] = Prior(1.0, 0.5)
        priors["ring_chunk_efficiency"] = Prior(
            values["ring_chunk_efficiency"], basis["ring_chunk_efficiency"].relative_sigma
        )
    return base, priors


def fit_published(gpu: str, exclude: set[str] | None = None, reference: Profile | None = None) -> Profile:
    """Fit one GPU type's profile to the published data (optionally leaving cells out)."""
    data = load_published()
    observations = [o for o in published_observations(gpu, data) if o.label not in (exclude or set())]
    base, priors = prior_profile(gpu, reference)
    pipelined = _pipelined_from_concurrency(data, gpu)
    if pipelined is None and reference is not None:
        pipelined = reference.pipelined_s  # assumed the same HTTP/mux overlap on the other GPU
    if pipelined is not None:
        base = base.model_copy(update={"pipelined_s": round(pipelined, 2)})
    source = "fit to published cells (REFERENCE.md sections 5 and 8)"
    if gpu == "H200":
        source += ", the H200 single-operation floor and the 2026-12-01 mechanism measurements"
    if reference is not None:
        source += f"; priors scaled from the {reference.gpu} fit by datasheet ratios"
    fitted = fit_profile(base, observations, priors, source)
    return fitted.model_copy(update={"basis": _published_basis(fitted, observations)})


def _published_basis(profile: Profile, observations: Sequence[Observation]) -> dict[str, ParamBasis]:
    """The backend factors are read off the published backend cells alone: their basis is those cells."""
    basis = dict(profile.basis)
    labels = {o.label for o in observations}
    for token, name in (("cudnn", "attn_cudnn_factor"), ("fi", "attn_fi_factor")):
        cell = next((label for label in labels if f"-{token} " in label), None)
        if cell is not None and name in basis:
            source = f"fitted to the published cell '{cell}' as its ratio to the same run's FLASH_ATTN cell"
            if token == "cudnn":
                kernel = _kernel_terms()["attn_cudnn_kernel_ratio"]
                source += (
                    f"; the kernels alone give {kernel.value:.3f} ({kernel.source}): the rest of the gap is not "
                    "in the attention kernel and has no measured basis"
                )
            basis[name] = ParamBasis(kind="published", source=source, sigma=0.03)
    return basis


def _kernel_terms() -> dict[str, Any]:
    """The backend kernel terms of the committed H200 run (policies/mech_terms.py)."""
    return mech_terms.backend_terms(mech_terms.load_mech(mech_terms.H200_BACKENDS), mech_terms.H200_BACKENDS.name)


def fit_all() -> dict[str, Profile]:
    """H200 first (it has the floor), then B200 with priors scaled from the H200 fit."""
    h200 = fit_published("H200")
    b200 = fit_published("B200", reference=h200)
    return {"H200": h200, "B200": b200}


def write_shipped_profiles(directory: Path = PROFILES_DIR) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    spread = round(families.unmeasured_spread(families.leave_family_out(fit_published, load_published())), 4)
    family_basis = ParamBasis(
        kind="fitted",
        source="leave-family-out (policies/families.py): the RMS error of every plan family's cells predicted by "
        "fits made without them",
        sigma=0.5,
    )
    for gpu, profile in fit_all().items():
        profile = profile.model_copy(
            update={
                "unmeasured_family_sigma": spread,
                "basis": {**profile.basis, "unmeasured_family_sigma": family_basis},
            }
        )
        path = directory / f"{gpu}.yaml"
        rounded = profile.model_copy(
            update={k: round(v, 4) for k, v in profile.model_dump().items() if isinstance(v, float)}
        )
        rounded.dump(path)
        paths.append(path)
    return paths


def shipped_profile(gpu: str) -> Profile:
    """The calibrated profile worldtune ships for a GPU type; a clear error names the way out."""
    from worldtune.tools.words.errors import InvalidInput

    spec = get_gpu(gpu)
    path = PROFILES_DIR / f"{spec.name}.yaml"
    if not path.is_file():
        shipped = sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))
        raise InvalidInput(
            "gpu",
            gpu,
            f"a GPU with a calibrated profile ({', '.join(shipped)})",
            f"run `worldtune calibrate --gpu {spec.name}` or pass --profile FILE",
        )
    return Profile.load(path)


if __name__ == "__main__":
    for written in write_shipped_profiles():
        print(written)
