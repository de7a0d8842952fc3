"""Issue 13's mechanism terms: attention backend token and rules, ring, Ulysses packing, VAE tiles, FP8, the
terms read off the committed H200 mechanism measurements, and the ranking figures of model_accuracy."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from typing import Any

import pytest

from worldtune.policies import mech_terms, perf_model
from worldtune.policies.calibration import shipped_profile
from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.gpus import get_gpu
from worldtune.tools.words.models import get_model
from worldtune.tools.words.plan import Plan
from worldtune.tools.words.plan_rules import check
from worldtune.tools.words.workload import anchor_workload

WL = anchor_workload()
ROOT = Path(__file__).resolve().parents[3]


def latency(plan: str, **changes: float) -> float:
    profile = shipped_profile("H200").with_changes(**changes) if changes else shipped_profile("H200")
    return perf_model.predict(WL, Plan.parse(plan), profile).latency_s


# ---- the backend token -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "printed", "flag"),
    [("cudnn-cfg2-u4-hsdp8", "cfg2-u4-hsdp8-cudnn", "CUDNN_ATTN"), ("fi-tp8", "tp8-fi", "FLASHINFER_ATTN"),
     ("fa", "fa", "FLASH_ATTN"), ("fp8-fa-cfg2-hsdp2", "cfg2-hsdp2-fp8-fa", "FLASH_ATTN")],
)  # fmt: skip
def test_backend_token_prints_last_and_renders_the_serve_flag(text: str, printed: str, flag: str) -> None:
    plan = Plan.parse(text)
    assert str(plan) == printed and Plan.parse(printed) == plan
    flags = plan.serve_flags()
    assert flags[flags.index("--diffusion-attention-backend") + 1] == flag
    assert "--diffusion-attention-backend" not in Plan.parse("cfg2-u4-hsdp8").serve_flags()


def test_two_backends_are_refused_with_the_grammar() -> None:
    with pytest.raises(InvalidInput, match="one attention backend"):
        Plan.parse("cfg2-fa-cudnn")


@pytest.mark.parametrize(
    ("plan", "gpu", "rule"),
    [("cfg2-u2-r2-hsdp8-cudnn", "H200", "ring-backend"), ("cfg2-r4-fi", "H200", "ring-backend"),
     ("cfg2-u2-r2-hsdp8", "B200", "ring-blackwell"), ("cfg2-u4-hsdp8-fa", "B200", "fa-blackwell")],
)  # fmt: skip
def test_backend_rules_of_vllm_omni_030(plan: str, gpu: str, rule: str) -> None:
    verdict = check(Plan.parse(plan), WL, get_gpu(gpu), shipped_profile(gpu))
    assert not verdict.valid and verdict.rule == rule and verdict.alternative


@pytest.mark.parametrize(("plan", "gpu"), [("cfg2-u2-r2-hsdp8", "H200"), ("cfg2-u4-hsdp8-cudnn", "B200")])
def test_what_vllm_omni_030_runs_stays_valid(plan: str, gpu: str) -> None:
    assert check(Plan.parse(plan), WL, get_gpu(gpu), shipped_profile(gpu)).valid


def test_backend_rates_come_from_the_profile() -> None:
    assert latency("cfg2-u4-hsdp8-fa") == pytest.approx(latency("cfg2-u4-hsdp8"))  # FA is H200's default
    slow = latency("cfg2-u4-hsdp8-cudnn")
    assert slow > latency("cfg2-u4-hsdp8") * 1.05
    assert latency("cfg2-u4-hsdp8-cudnn", attn_cudnn_factor=1.0) == pytest.approx(latency("cfg2-u4-hsdp8"))


# ---- ring, Ulysses, VAE, FP8 terms -------------------------------------------------------------------------
def test_ring_pays_chunking_merge_and_hops_and_ulysses_does_not() -> None:
    free = {"ring_chunk_efficiency": 1.0, "ring_merge_ms_per_gelem": 0.0, "ring_hop_latency_us": 0.0}
    assert latency("cfg2-u2-r2-hsdp8") > latency("cfg2-u2-r2-hsdp8", **free) + 1.0
    assert latency("cfg2-u4-hsdp8") == pytest.approx(latency("cfg2-u4-hsdp8", **free))
    spec, profile = get_model(WL.model), shipped_profile("H200")
    merged = perf_model.step_breakdown(spec, WL, Plan.parse("cfg2-r4"), profile)
    unmerged = perf_model.step_breakdown(
        spec, WL, Plan.parse("cfg2-r4"), profile.with_changes(ring_merge_ms_per_gelem=0)
    )
    elements = math.ceil(WL.video_tokens / 4) * 64 * 128  # per GPU: tokens/4 x 64 heads x 128
    expected = 3 * elements / 1e9 * profile.ring_merge_ms_per_gelem * 1e-3 * 64  # 3 extra hops, 64 layers
    assert merged.ring_s - unmerged.ring_s == pytest.approx(expected, rel=1e-9)


def test_ulysses_pack_is_four_passes_over_the_moved_bytes() -> None:
    spec, profile = get_model(WL.model), shipped_profile("H200")
    with_pack = perf_model.step_breakdown(spec, WL, Plan.parse("u2"), profile).ulysses_s
    without = perf_model.step_breakdown(
        spec, WL, Plan.parse("u2"), profile.with_changes(ulysses_pack_ms_per_gb=0)
    ).ulysses_s
    moved = math.ceil(WL.video_tokens / 2) * (2 * 8192 + 2 * 1024) * 2
    passes = 2 * 64  # two CFG branches on one Ulysses group, 64 layers
    assert with_pack - without == pytest.approx(passes * 4 * moved / 1e9 * profile.ulysses_pack_ms_per_gb * 1e-3)


def test_vae_tiles_follow_the_wan_tiling_and_spread_by_work() -> None:
    tiles = perf_model.vae_tiles(45, 80)  # 720p at 16x
    assert len(tiles) == 28 and sum(tiles) == 5928 and max(tiles) == 256
    assert perf_model.busiest_rank([2.0, 3.0, 4.0, 3.0], 2) == 6.0  # largest first to the least loaded
    # measured tile costs: PP2 tiles more work than it spreads (the published 121.13 s), PP8 gains
    assert latency("cfg2-u4-hsdp8-vae2") > latency("cfg2-u4-hsdp8")
    assert latency("cfg2-u4-hsdp8-vae8") < latency("cfg2-u4-hsdp8") - 1.0
    nothing = {"vae_tile_fixed_share": 0.3}  # a rehearsal truth where patch parallel gives nothing
    assert latency("cfg2-u4-hsdp8-vae8", **nothing) >= latency("cfg2-u4-hsdp8", **nothing)


def test_old_profiles_keep_the_old_vae_model() -> None:
    old = shipped_profile("H200").with_changes(vae_tile_area_cost=0.0, vae_parallel_efficiency=1.0)
    assert perf_model.vae_time_s(WL, Plan.parse("vae8"), old) == pytest.approx(old.vae_decode_s / 8)


def test_fp8_speeds_linear_layers_only() -> None:
    spec, profile = get_model(WL.model), shipped_profile("H200")
    bf16 = perf_model.step_breakdown(spec, WL, Plan.parse("cfg2-u4-hsdp8"), profile)
    fp8 = perf_model.step_breakdown(spec, WL, Plan.parse("cfg2-u4-hsdp8-fp8"), profile)
    assert fp8.attention_s == pytest.approx(bf16.attention_s)
    # the layer's non-GEMM work rides with linear_s and stays BF16 (issue 26): FP8 speeds the GEMMs alone
    rest = perf_model.rest_time_s(spec.generator, WL.video_tokens // 4, 1, profile) * 2 * spec.generator.layers / 2
    assert rest > 0
    assert (bf16.linear_s - rest) / (fp8.linear_s - rest) == pytest.approx(profile.fp8_linear_speedup)


# ---- the committed measurements ----------------------------------------------------------------------------
def test_terms_read_off_the_committed_h200_measurements() -> None:
    terms = mech_terms.h200_terms()
    assert 0.928 <= terms["ring_chunk_efficiency"].value <= 0.995  # between cuDNN and FA2
    assert 8.0 < terms["ring_merge_ms_per_gelem"].value < 16.0
    assert 1200 < 1e3 / terms["ulysses_pack_ms_per_gb"].value < 2000  # GB/s, a memory-bound copy
    assert 1.5 < terms["fp8_linear_speedup"].value < 1.9
    assert 0.0 < terms["vae_tile_fixed_share"].value < 0.1 and 0.4 < terms["vae_tile_area_cost"].value < 1.0
    profile = shipped_profile("H200")
    for name in terms:
        assert profile.basis_of(name).kind == "measured" and ".json" in profile.basis_of(name).source, name
    assert profile.basis_of("attn_cudnn_factor").kind == "published"
    assert profile.basis_of("ring_overlap").kind == "assumed"


def test_the_h200_backend_run_gives_fa3s_ring_and_the_kernels_share_of_the_cudnn_gap() -> None:
    """The 2026-12-02 run timed FA3 as vLLM-Omni's FLASH_ATTN calls it: the ring terms are FA3's, the shipped
    attention rate sits on FA3's floor, and the cuDNN factor says how little of its published gap the kernels
    explain (the fit's prior when the cuDNN cell is left out)."""
    backends = mech_terms.load_mech(mech_terms.H200_BACKENDS)
    efficiency, _ = mech_terms.ring_terms(backends, "backends")
    assert "fa3" in efficiency.source and "cudnn" not in efficiency.source
    terms = mech_terms.backend_terms(backends, "backends")
    kernel = terms["attn_cudnn_kernel_ratio"]
    assert set(kernel.detail) == {"u1", "u2", "u4", "u8"} and 0.9 < kernel.value < 1.05
    profile = shipped_profile("H200")
    assert profile.attn_tflops == pytest.approx(terms["fa3_anchor_tflops"].value, rel=0.03)
    published = profile.basis_of("attn_cudnn_factor")
    assert published.kind == "published" and f"{kernel.value:.3f}" in published.source
    assert profile.attn_cudnn_factor < kernel.value - 0.05  # the published gap is wider than the kernels'
    assert profile.basis_of("attn_fa_factor").kind == "measured"


def test_a_file_that_is_not_a_mechbench_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text('{"format": "something else"}')
    with pytest.raises(InvalidInput, match="gpu-mechbench"):
        mech_terms.load_mech(bad)


# ---- the microbench itself (CPU, toy shapes) ----------------------------------------------------------------
def _mechbench() -> Any:
    """policies/instruments/mechbench.py loaded by file path, as a bare GPU node runs it (its folder becomes the
    package `instruments`)."""
    spec = importlib.util.spec_from_file_location("mechbench_test", ROOT / "policies" / "instruments" / "mechbench.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


torch = pytest.importorskip("torch")


def test_ring_merge_reproduces_one_call_and_tiles_match_the_model() -> None:
    mb = _mechbench()
    attention = mb.mech_attention
    q, k, v = attention.gqa_inputs(mb.TINY, 64, 96, 8, 2, torch.device("cpu"))
    one = attention.sdpa_lse(q, k, v, "math")[0].float()
    chunks = [(k[:, :, a : a + 32], v[:, :, a : a + 32]) for a in (0, 32, 64)]
    merged = attention.ring_attention(q, chunks, "math")
    assert float((merged - one).norm() / one.norm()) < 1e-2
    vae, full = mb.vae_standin, mb.FULL  # the tiles the VAE section times are the model's, at 720p
    codes = [h * 1000 + w for h, w in full.vae_tiles]
    assert full.latent[1:] == (45, 80)
    assert sorted((c // 1000) * (c % 1000) for c in codes) == sorted(perf_model.vae_tiles(45, 80))
    assert vae.patch_with_halo(45, 80, 2, *full.vae_tile) == (45, 60)


class _MathFA3:
    """FA3's interface over math attention, on the CPU: (B, T, H, D) tensors, GQA by head groups, (out, lse)."""

    @staticmethod
    def flash_attn_func(q, k, v, softmax_scale, return_attn_probs=False):  # type: ignore[no-untyped-def]
        qt, kt, vt = (x.transpose(1, 2).float() for x in (q, k, v))
        kt, vt = (x.repeat_interleave(qt.shape[1] // x.shape[1], dim=1) for x in (kt, vt))
        scores = qt @ kt.transpose(-1, -2) * softmax_scale
        out = (torch.softmax(scores, dim=-1) @ vt).transpose(1, 2).to(q.dtype)
        return (out, torch.logsumexp(scores, dim=-1)) if return_attn_probs else out


def test_fa3_ring_chunks_merge_to_one_call_in_its_layout() -> None:
    mb, fa3 = _mechbench(), _MathFA3()
    q = torch.randn(1, 48, 8, 32)
    k, v = torch.randn(1, 96, 2, 32), torch.randn(1, 96, 2, 32)
    one = fa3.flash_attn_func(q, k, v, 32**-0.5).float()
    chunks = [(k[:, a : a + 32], v[:, a : a + 32]) for a in (0, 32, 64)]
    merged = mb.mech_attention.fa3_chunks(fa3, q, chunks, 32**-0.5, True)
    assert float((merged - one).norm() / one.norm()) < 1e-5
    assert mb.mech_attention.fa3_chunks(fa3, q, chunks, 32**-0.5, False) is None


def test_the_backend_section_records_fa3_as_missing_where_it_is_not_installed(tmp_path: Path) -> None:
    mb = _mechbench()
    out = tmp_path / "mech.json"
    args = ["--out", str(out), "--tiny", "--device", "cpu", "--sections", "backends", "--reps", "1", "--warmup", "0"]
    assert mb.main(args) == 0
    data = mech_terms.load_mech(out)
    names = {r["name"]: r for r in data["records"]}
    assert {f"backend-math-u{u}" for u in (1, 2, 4, 8)} <= set(names)
    if mb.mech_attention.fa3_module() is None:
        assert "fa3-fwd" in names["backend-fa3-u4"]["error"]
    assert mech_terms.backend_terms(data, "toy") == {}  # no cuDNN/FA3 pair on the CPU: no term, not a guess


def test_vae_decoder_stand_in_decodes_causally_at_16x() -> None:
    vae = _mechbench().vae_standin
    decoder = vae.build_decoder(4, torch.device("cpu"))
    z = torch.randn(1, 16, 2, 3, 4, dtype=torch.bfloat16)
    out = vae.vae_decode(decoder, z)
    assert tuple(out.shape) == (1, 3, 5, 48, 64)  # 1 + 4 frames, 16x each side


# ---- the ranking figures of benchmarks/model_accuracy.py --------------------------------------------------------
def _accuracy() -> object:
    spec = importlib.util.spec_from_file_location("model_accuracy_test", ROOT / "benchmarks" / "model_accuracy.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(plan: str, measured: float, predicted: float) -> dict[str, object]:
    return {"gpu": "H200", "plan": plan, "steps": 35, "measured_s": measured, "predicted_s": predicted}


def test_ranking_merges_one_configuration_and_scores_the_order() -> None:
    ma = _accuracy()
    profiles = {"H200": shipped_profile("H200")}
    rows = [
        _row("cfg2-u4-hsdp8", 120.5, 120.0),
        _row("cfg2-u4-hsdp8-fa", 119.0, 120.0),
        _row("tp8", 131.0, 130.0),
        _row("cfg2-u2-r2-hsdp8", 124.0, 125.0),
        _row("cfg2-u4-hsdp8-cudnn", 131.5, 119.0),
    ]
    (group,) = ma.ranking(rows, profiles, "predicted_s")  # type: ignore[attr-defined]
    assert group["configurations"] == 4  # -fa is H200's default: the same server as cfg2-u4-hsdp8
    assert group["measured_best"] == "cfg2-u4-hsdp8" and group["predicted_best"] == "cfg2-u4-hsdp8-cudnn"
    assert not group["best_matches"] and group["kendall_tau"] < 1.0
    rows[-1]["predicted_s"] = 132.0
    (group,) = ma.ranking(rows, profiles, "predicted_s")  # type: ignore[attr-defined]
    assert group["best_matches"] and group["kendall_tau"] == pytest.approx(1.0)
