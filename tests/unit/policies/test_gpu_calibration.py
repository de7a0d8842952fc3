"""GPU calibration on the CPU: the micro-benchmarks' shape logic, raw -> Profile, the committed H200 data, the CLI."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from worldtune.policies import gpu_calibration as gc
from worldtune.policies import perf_model
from worldtune.policies.calibration import load_published, shipped_profile
from worldtune.policies.instruments import microbench as mb
from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.models import get_model
from worldtune.tools.words.plan import Plan
from worldtune.tools.words.profile import Profile
from worldtune.tools.words.workload import anchor_workload

MEASURED = Path(__file__).resolve().parents[3] / "policies" / "profiles" / "measured"
HAS_TORCH = importlib.util.find_spec("torch") is not None


# ---- shape logic against hand-computed values ----------------------------------------------------------------
def test_layer_shape_matches_the_model_spec_and_hand_count() -> None:
    # q, o: 2 x 5120 x 8192; k, v: 2 x 5120 x 1024; SwiGLU: 3 x 5120 x 25600
    assert mb.FULL.layer.params == 83_886_080 + 10_485_760 + 393_216_000 == 487_587_840
    assert mb.FULL.layer.params == get_model("cosmos3-super").generator.params_per_layer
    wl = anchor_workload()
    assert (mb.FULL.video_tokens, mb.FULL.prompt_tokens) == (wl.video_tokens, wl.prompt_tokens) == (44160, 4096)


def test_flops_per_op_at_the_anchor() -> None:
    assert mb.linear_flops(44160, mb.FULL.layer) == 43_063_758_028_800
    assert mb.linear_flops(44160, mb.FULL.layer, tp=8) == 43_063_758_028_800 / 8
    assert mb.attention_flops(44160, 48256, 64, 128) == 69_828_115_169_280
    # REFERENCE.md section 5: 68.7 ms at ~627 TFLOP/s and 113.5 ms at ~615 TFLOP/s
    assert mb.linear_flops(44160, mb.FULL.layer) / 0.0687 / 1e12 == pytest.approx(627, rel=0.002)
    assert mb.attention_flops(44160, 48256, 64, 128) / 0.1135 / 1e12 == pytest.approx(615, rel=0.002)


def test_token_sweep_holds_the_sequence_parallel_splits() -> None:
    sweep = mb.token_sweep(44160)
    assert sweep[:4] == [44160, 22080, 11040, 5520]
    assert len(sweep) == mb.HALVINGS and sweep == sorted(sweep, reverse=True) and sweep[-1] == 173


def test_bytes_per_collective_per_scheme() -> None:
    assert mb.ulysses_bytes(mb.FULL, 4) == (11040 * 10240 * 2, 11040 * 8192 * 2) == (226_099_200, 180_879_360)
    assert mb.ulysses_bytes(mb.FULL, 2)[0] == 452_198_400
    assert mb.tp_allreduce_bytes(mb.FULL) == 44160 * 5120 * 2 == 452_198_400
    assert mb.tp_allreduce_bytes(mb.FULL, 2) == 226_099_200
    assert mb.hsdp_gather_bytes(mb.FULL) == 975_175_680
    assert mb.hsdp_gather_bytes(mb.FULL, 1) == 487_587_840
    assert mb.cfg_gather_bytes(mb.FULL) == 44160 * 64 * 2
    assert mb.FULL.bus_bytes("allreduce", 800, 8) == 1400
    assert mb.FULL.bus_bytes("a2a", 800, 8) == mb.FULL.bus_bytes("allgather", 800, 8) == 700
    with pytest.raises(ValueError, match="collective"):
        mb.FULL.bus_bytes("broadcast", 8, 2)
    names = [c.name for c in mb.collective_cases(mb.FULL)]
    assert len(names) == len(set(names))
    assert {"a2a-u8-qkv", "allreduce-sp1", "allgather-hsdp-bf16", "a2a-probe", "allgather-cfg"} <= set(names)


def _per_layer_bytes(plan: str, field: str, **profile_changes: Any) -> float:
    """Bytes perf_model moves per layer for one scheme: its time with 1 GB/s links and no latency."""
    profile = shipped_profile("H200").with_changes(
        collective_latency_us=0.0, a2a_gbps=1.0, allreduce_gbps=1.0, allgather_gbps=1.0, **profile_changes
    )
    wl = anchor_workload()
    p = Plan.parse(plan)
    step = perf_model.step_breakdown(get_model(wl.model), wl, p, profile)
    passes = max(1, wl.cfg_branches // p.cfg)
    return float(getattr(step, field)) / (passes * get_model(wl.model).generator.layers) * 1e9


@pytest.mark.parametrize("degree", [2, 4, 8])
def test_microbench_sizes_are_the_bytes_the_performance_model_charges(degree: int) -> None:
    qkv, out = mb.ulysses_bytes(mb.FULL, degree)
    moved = _per_layer_bytes(f"u{degree}", "ulysses_s", ulysses_pack_ms_per_gb=0.0)  # the all-to-alls alone
    assert moved == pytest.approx(
        mb.FULL.bus_bytes("a2a", qkv, degree) + mb.FULL.bus_bytes("a2a", out, degree), rel=1e-9
    )
    tp = _per_layer_bytes(f"tp{degree}", "tp_s")
    assert tp == pytest.approx(2 * mb.FULL.bus_bytes("allreduce", mb.tp_allreduce_bytes(mb.FULL), degree), rel=1e-9)
    hsdp = _per_layer_bytes(f"hsdp{degree}", "hsdp_s", hsdp_overlap=0.0)
    assert hsdp == pytest.approx(mb.FULL.bus_bytes("allgather", mb.hsdp_gather_bytes(mb.FULL), degree), rel=1e-9)


# ---- raw -> Profile on a synthetic raw file ----------------------------------------------------------------
LIN_PEAK, ATT_PEAK, HALF, LAT_US, BW = 700.0, 600.0, 200.0, 20.0, 300.0


def synthetic_raw(world: int = 2) -> dict[str, Any]:
    """A raw file whose rates follow peak x t/(t+h) and whose collectives take latency + bus bytes / bandwidth."""
    ops = []
    for t in mb.token_sweep(mb.FULL.video_tokens):
        for op, peak in (("linear", LIN_PEAK), ("attention", ATT_PEAK)):
            ops.append({"op": op, "name": f"{op}-t{t}", "tokens": t, "tp": 1, "tflops": peak * t / (t + HALF),
                        "median_ms": 1.0})  # fmt: skip
    ops.append({"op": "linear_tp", "name": "linear-tp8-t44160", "tokens": 44160, "tp": 8, "tflops": 1.0})
    collectives = []
    if world > 1:
        for case in mb.collective_cases(mb.FULL):
            moved = mb.FULL.bus_bytes(case.collective, case.buffer_bytes, world)
            time_ms = (LAT_US * 1e-6 + moved / (BW * 1e9)) * 1e3
            collectives.append({**case.__dict__, "world": world, "bus_bytes": moved, "median_ms": time_ms})
    return {
        "format": mb.RAW_FORMAT,
        "date": "2026-01-02T03:04:05+00:00",
        "tiny": False,
        "sizes": {"video_tokens": 44160, "prompt_tokens": 4096, "layers": 64},
        "hardware": {"device_type": "cuda", "gpu_name": "NVIDIA H200", "world": world, "gpu_count": world},
        "ops": ops,
        "collectives": collectives,
        "attention_backend": "cudnn",
    }


def test_fit_recovers_the_rates_and_links_a_synthetic_raw_file_was_made_with(tmp_path: Path) -> None:
    path = tmp_path / "raw.json"
    path.write_text(json.dumps(synthetic_raw()))
    profile = gc.measured_profile(gc.load_raw(path), "H200")
    assert profile.linear_tflops == pytest.approx(LIN_PEAK, rel=0.01)
    assert profile.attn_tflops == pytest.approx(ATT_PEAK, rel=0.01)
    assert profile.half_rate_tokens == pytest.approx(HALF, rel=0.05)
    assert profile.collective_latency_us == pytest.approx(LAT_US, rel=1e-3)
    for value in (profile.a2a_gbps, profile.allreduce_gbps, profile.allgather_gbps, profile.link_gbps):
        assert value == pytest.approx(BW, rel=0.001)
    assert profile.date == "2026-01-02" and "2 GPUs" in profile.source and "a2a_gbps" in profile.source
    shipped = shipped_profile("H200")
    assert profile.vae_decode_s == shipped.vae_decode_s and profile.load_base_s == shipped.load_base_s
    assert gc.profile_name(gc.load_raw(path), "h200") == "H200-2gpu-2026-01-02"


def test_one_gpu_raw_keeps_the_shipped_collectives_and_says_so() -> None:
    profile = gc.measured_profile(synthetic_raw(world=1), "H200")
    shipped = shipped_profile("H200")
    assert (profile.link_gbps, profile.collective_latency_us) == (shipped.link_gbps, shipped.collective_latency_us)
    assert profile.a2a_gbps is None
    assert any("collectives" in a and "shipped" in a for a in profile.assumed)
    assert profile.linear_tflops == pytest.approx(LIN_PEAK, rel=0.01)


def test_profile_file_round_trip(tmp_path: Path) -> None:
    profile = gc.measured_profile(synthetic_raw(), "H200", raw_name="raw.json")
    profile.dump(tmp_path / "p.yaml")
    assert Profile.load(tmp_path / "p.yaml") == profile


def test_bad_raw_files_are_refused_with_the_reason(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="raw JSON file"):
        gc.load_raw(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(InvalidInput, match="valid JSON"):
        gc.load_raw(tmp_path / "bad.json")
    (tmp_path / "other.json").write_text(json.dumps({"format": "something else"}))
    with pytest.raises(InvalidInput, match="format"):
        gc.load_raw(tmp_path / "other.json")
    with pytest.raises(InvalidInput, match="measured on"):
        gc.measured_profile(synthetic_raw(), "B200")
    no_probe = synthetic_raw()
    no_probe["collectives"] = [c for c in no_probe["collectives"] if c["scheme"] != "latency probe"]
    with pytest.raises(InvalidInput, match="latency probe"):
        gc.collective_fit(no_probe)


# ---- comparison and the committed H200 data ------------------------------------------------------------------
def test_floor_step_is_reference_23_3_seconds() -> None:
    assert gc.floor_step_s("H200") == pytest.approx(23.3, abs=0.05)
    assert gc.floor_step_s("B200") is None


def test_comparison_covers_every_published_h200_cell() -> None:
    rows = gc.compare_published(shipped_profile("H200"))
    assert len(rows) == len([c for c in load_published()["cells"] if c["gpu"] == "H200"]) >= 9
    rec = [r for r in rows if "cfg2-u4-hsdp8" in r["cell"]]
    assert rec[0]["published_step_s"] == pytest.approx((166.26 - 120.57) / 15, rel=1e-3)
    # the shipped profile is fitted to these cells; the backend dashboard run sits ~1.3% below the server-stage cells
    assert all(abs(r["rel_error"]) < 0.015 for r in rows)


@pytest.mark.parametrize("stem", ["H200-1gpu-2026-11-29", "H200-2gpu-2026-11-29"])
def test_committed_profiles_are_what_the_committed_raw_files_give(stem: str) -> None:
    raw = gc.load_raw(MEASURED / f"{stem}.raw.json")
    assert raw["complete"] and raw["hardware"]["gpu_name"] == "NVIDIA H200" and not gc.is_toy(raw)
    committed = Profile.load(MEASURED / f"{stem}.yaml")
    remade = gc.measured_profile(raw, "H200", raw_name=f"{stem}.raw.json")
    for name in (*gc.COMPUTE_FIELDS, *gc.COLLECTIVE_FIELDS):
        value = getattr(remade, name)
        assert getattr(committed, name) == (None if value is None else pytest.approx(value, rel=1e-3)), name
    assert gc.profile_name(raw, "H200") == stem
    assert committed.hardware.startswith(f"{raw['hardware']['world']}x NVIDIA H200")


# ---- the microbench itself (needs torch; CPU, toy shapes) -----------------------------------------------------
@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed (pip install 'worldtune[calibrate]')")
def test_microbench_tiny_cpu_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "raw.json"
    assert mb.main(["--out", str(out), "--tiny", "--device", "cpu", "--reps", "2", "--warmup", "1"]) == 0
    raw = gc.load_raw(out)
    assert raw["complete"] and raw["tiny"] and raw["attention_check_rel_err"] < 1e-2
    names = {op["name"] for op in raw["ops"]}
    assert {"linear-t552", "attention-t552", "attention-u8", "attention-r2", "linear-tp8-t552"} <= names
    assert all(op["median_ms"] > 0 and op["tflops"] > 0 for op in raw["ops"] if op["op"] != "ceiling")
    profile = gc.measured_profile(raw, "H200")
    assert profile.source.startswith("TOY RUN") and gc.profile_name(raw, "H200").endswith("-toy")


# ---- the command line --------------------------------------------------------------------------------------
def _app() -> Any:
    from worldtune import cli, cli_calibrate

    app = copy.copy(cli.app)
    app.registered_commands = list(cli.app.registered_commands)
    cli_calibrate.register(app)
    return app


def test_cli_from_raw_and_from_a_job_log(tmp_path: Path) -> None:
    from worldtune.cli_calibrate import RAW_BEGIN, RAW_END

    raw_text = json.dumps(synthetic_raw(), indent=1)
    log = tmp_path / "job.log"
    prefixed = "\n".join(f"(worldtune-calibrate-h200-2gpu, pid=42) {line}" for line in raw_text.splitlines())
    log.write_text(f"setup noise\n(task, pid=42) {RAW_BEGIN}\n{prefixed}\n(task, pid=42) {RAW_END}\nbye\n")
    out = tmp_path / "p.yaml"
    result = CliRunner().invoke(_app(), ["calibrate", "--gpu", "H200", "--from-raw", str(log), "--out", str(out),
                                         "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["rates"]["linear_tflops"] == pytest.approx(LIN_PEAK, rel=0.01)
    assert Profile.load(out).a2a_gbps == pytest.approx(BW, rel=0.001)
    assert json.loads((tmp_path / "job.raw.json").read_text())["format"] == mb.RAW_FORMAT


def test_cli_refuses_bad_input_with_exit_2(tmp_path: Path) -> None:
    app = _app()
    for args in (
        ["calibrate", "--gpu", "Z9"],
        ["calibrate", "--device", "cpu"],
        ["calibrate", "--dry-run"],
        ["calibrate", "--from-raw", str(tmp_path / "none.json")],
        ["calibrate", "--infra", "nebius", "--gpus", "9", "--dry-run"],
    ):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2, (args, result.output)


def test_local_run_without_torch_says_how_to_get_it_mocked_find_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    from worldtune import cli_calibrate

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    with pytest.raises(InvalidInput, match=r"worldtune\[calibrate\]"):
        cli_calibrate.run_microbench(Path("unused.json"), None, True, "cpu")


def test_skypilot_task_renders_and_validates_offline() -> None:
    from worldtune.cli_calibrate import RAW_BEGIN, render_task, validate_task

    task = render_task("H200", 2, "nebius")
    assert task["resources"] == {"infra": "nebius", "accelerators": "H200:2", "disk_size": 100}
    assert task["envs"]["NCCL_NVLS_ENABLE"] == "0"
    assert Path(next(iter(task["file_mounts"].values()))).is_file()
    assert "--world 2" in task["run"] and RAW_BEGIN in task["run"]
    validate_task(task)
    broken = {**task, "resources": {**task["resources"], "infra": "no-such-cloud"}}
    with pytest.raises(InvalidInput, match="SkyPilot"):
        validate_task(broken)


def test_mechanism_terms_from_the_committed_h200_run_overlay_a_measured_profile() -> None:
    from worldtune.policies.mech_terms import H200_MECH, load_mech

    raw = gc.load_raw(MEASURED / "H200-1gpu-2026-11-29.raw.json")
    profile = gc.measured_profile(raw, "H200", raw_name="H200-1gpu-2026-11-29.raw.json")
    mech = gc.with_mechanisms(profile, load_mech(H200_MECH), H200_MECH.name)
    assert 0.928 <= mech.ring_chunk_efficiency <= 0.995 and mech.ring_merge_ms_per_gelem > 5
    assert mech.basis_of("ulysses_pack_ms_per_gb").kind == "measured"
    assert H200_MECH.name in mech.basis_of("ring_merge_ms_per_gelem").source
    assert mech.vae_decode_s == profile.vae_decode_s  # a stand-in decoder's seconds do not replace the fit's
