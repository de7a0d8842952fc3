"""The generator-step benchmark on the CPU: plan grammar, rank layout, weight slices, a tiny step, the comparison."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from worldtune.policies import perf_model
from worldtune.policies.instruments import generator_step as step
from worldtune.policies.instruments import microbench as mb
from worldtune.policies.instruments import step_compare, step_runner
from worldtune.policies.instruments import step_plan as plans
from worldtune.tools.words.models import get_model
from worldtune.tools.words.plan import Plan
from worldtune.tools.words.profile import Profile
from worldtune.tools.words.workload import anchor_workload

REPO = Path(__file__).resolve().parents[3]
MEASURED = REPO / "policies" / "profiles" / "measured"
RUN_8_LAYERS = MEASURED / "H200-2gpu-2026-11-29.generator-step-8layers.json"
PROFILE = MEASURED / "H200-2gpu-2026-11-29.yaml"
HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed (pip install 'worldtune[calibrate]')")


def _load() -> types.ModuleType:
    """benchmarks/generator_step.py is a script (it also runs on a GPU node without worldtune): load it by path."""
    if "generator_step" not in sys.modules:
        spec = importlib.util.spec_from_file_location("generator_step", REPO / "benchmarks" / "generator_step.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["generator_step"] = module
        spec.loader.exec_module(module)
    return sys.modules["generator_step"]


gs: Any = _load()


# ---- the plan grammar and the rank layout ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "text", ["1gpu", "cfg2", "u2", "tp2", "cfg2-hsdp2", "hsdp8", "cfg2-u4-hsdp8", "tp8", "u4-cfg2", "cfg2-tp2-u2"]
)
def test_device_plan_parser_agrees_with_tools_plan(text: str) -> None:
    step_plan, plan = plans.parse_plan(text, mb.FULL), Plan.parse(text)
    assert step_plan.name == str(plan)
    assert step_plan.world == plan.world_size
    assert (step_plan.cfg, step_plan.ulysses, step_plan.tp, step_plan.hsdp) == (
        plan.cfg,
        plan.ulysses,
        plan.tp,
        plan.hsdp,
    )


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("r2", "bad or repeated token"),
        ("fp8", "bad or repeated token"),
        ("", "bad or repeated token"),
        ("tp2-tp4", "bad or repeated token"),
        ("cfg4", "cfg is 1 or 2"),
        ("tp2-hsdp2", "cannot be combined with tp"),
        ("cfg2-hsdp3", "must divide the world"),
        ("u16", "KV heads"),
        ("hsdp1", "2 or more"),
    ],
)
def test_bad_plans_are_refused_with_the_reason(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        plans.parse_plan(text, mb.FULL)


def test_rank_layout_of_the_published_8gpu_plans() -> None:
    recommended = plans.parse_plan("cfg2-u4-hsdp8", mb.FULL)
    assert recommended.groups() == {
        "ulysses": [[0, 1, 2, 3], [4, 5, 6, 7]],  # two concurrent Ulysses-4 groups, one per CFG branch
        "cfg": [[0, 4], [1, 5], [2, 6], [3, 7]],
        "hsdp": [list(range(8))],
    }
    assert plans.parse_plan("tp8", mb.FULL).groups() == {"tp": [list(range(8))]}
    composed = plans.parse_plan("cfg2-u2-tp2", mb.FULL)
    for rank in range(composed.world):
        assert composed.rank_of(*composed.coords(rank)) == rank
    assert composed.groups()["tp"][:2] == [[0, 1], [2, 3]] and composed.groups()["cfg"][0] == [0, 4]
    # standalone HSDP replicates the whole step: every rank is at (0, 0, 0)
    assert {plans.parse_plan("hsdp4", mb.FULL).coords(r) for r in range(4)} == {(0, 0, 0)}


def _tp_part(layer: Any, tp: int) -> Any:
    return dataclasses.replace(layer, q_heads=layer.q_heads // tp, kv_heads=layer.kv_heads // tp, ffn=layer.ffn // tp)


def test_layer_dims_are_the_generator_layer_and_tp_divides_it() -> None:
    layer = mb.FULL.layer
    assert layer.params == get_model("cosmos3-super").generator.params_per_layer
    for tp in (2, 4, 8):
        assert _tp_part(layer, tp).params * tp == layer.params


@needs_torch
def test_tp_slices_are_the_right_rows_and_columns() -> None:
    import torch

    layer = step.TINY.layer
    flat, _ = plans.full_layer(step.TINY, 0, 17, torch.device("cpu"), torch.float32)
    w_qkv, w_o, w_gate_up, w_down = plans.weight_views(layer, flat)
    s_qkv, s_o, s_gate_up, s_down = plans.weight_views(_tp_part(layer, 2), plans.tp_slice(flat, step.TINY, 2, 1))
    q, kv, f = layer.q_dim, layer.kv_dim, layer.ffn
    assert torch.equal(s_qkv[: q // 2], w_qkv[q // 2 : q])  # second half of the query heads
    assert torch.equal(s_qkv[q // 2 : q // 2 + kv // 2], w_qkv[q + kv // 2 : q + kv])  # second half of the K heads
    assert torch.equal(s_o, w_o[:, q // 2 :])
    assert torch.equal(s_gate_up[f // 2 :], w_gate_up[f + f // 2 :])  # second half of "up"
    assert torch.equal(s_down, w_down[:, f // 2 :])


# ---- one tiny step in this process (the multi-process plans run in tests/integration) ----------------------------
@needs_torch
def test_one_process_tiny_step_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "raw.json"
    argv = ["--out", str(out), "--tiny", "--device", "cpu", "--plans", "1gpu", "--layers", "16", "--check"]
    assert gs.main([*argv, "--reps", "2", "--warmup", "1"]) == 0
    raw = json.loads(out.read_text())
    assert raw["format"] == step.RAW_FORMAT and raw["complete"] and raw["tiny"] and raw["hardware"]["world"] == 1
    (entry,) = raw["plans"]
    assert entry["plan"] == "1gpu" and entry["world"] == 1 and len(entry["ranks"][0]["step_ms"]) == 2
    assert entry["per_step_s_scaled"] == pytest.approx(entry["step_ms"] * 1e-3 * 64 / 16)
    # 16 layers stay finite thanks to the pre-norms (without them these shapes overflow by layer 16, as the full
    # model's did by layer ~9 on the GPU); the reference is the same code, so the error is exactly zero
    assert entry["output_finite"] is True and entry["check_rel_err"] == 0.0
    assert entry["comm"] == {}


@needs_torch
def test_refusals_name_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, flag in (
        (["--tiny", "--device", "cpu", "--plans", "tp2", "--out", "x.json"], "--plans tp2: needs 2 ranks"),
        (["--tiny", "--device", "cpu", "--plans", "r2", "--out", "x.json"], "plan='r2'"),
        (["--tiny", "--device", "cpu", "--layers", "0", "--out", "x.json"], "--layers=0"),
        (["--tiny", "--device", "cpu"], "--out"),
    ):
        with pytest.raises(SystemExit) as exc:
            gs.parse_args(argv)
        assert exc.value.code == 2
        assert flag in capsys.readouterr().err


def test_comm_log_reports_bus_bandwidth_per_kind() -> None:
    log = step_runner.CommLog(cuda=False, sizes=mb.FULL)
    for begin in (0.0, 1.0, 2.0, 3.0):  # four all-reduces of 1 MB over 2 steps, each 1 ms on the host clock
        log.stop("tp_allreduce", 2, 10**6, begin)
        log.entries[-1] = (*log.entries[-1][:4], begin + 1e-3)
    summary = log.summary(steps=2)["tp_allreduce"]
    assert summary["calls_per_step"] == 2 and summary["group_size"] == 2
    assert summary["median_ms"] == pytest.approx(1.0) and summary["ms_per_step"] == pytest.approx(2.0)
    assert summary["busbw_gbps"] == pytest.approx(mb.FULL.bus_bytes("allreduce", 10**6, 2) / 1e-3 / 1e9)


def test_own_comm_is_the_rank_that_waited_least() -> None:
    def record(rank: int, ms: float) -> dict[str, Any]:
        return {"rank": rank, "comm": {"ulysses_a2a": {"ms_per_step": ms, "busbw_gbps": 100 / ms}}}

    own = step.own_comm([record(0, 104.0), record(1, 30.0)])["ulysses_a2a"]
    assert own["rank"] == 1 and own["ms_per_step"] == 30.0 and own["max_ms_per_step"] == 104.0


# ---- the comparison with the performance model ------------------------------------------------------------------
def test_comparison_of_the_committed_h200_run() -> None:
    raw = json.loads(RUN_8_LAYERS.read_text())
    result = step_compare.comparison_rows([raw], PROFILE)
    rows = {r["plan"]: r for r in result["rows"]}
    assert set(rows) == {"1gpu", "cfg2", "u2", "tp2", "cfg2-hsdp2"}
    profile = Profile.load(PROFILE)
    wl = anchor_workload()
    for name, row in rows.items():
        entry = next(e for e in raw["plans"] if e["plan"] == name)
        assert row["measured_per_step_s"] == pytest.approx(entry["step_ms"] * 1e-3 * 64 / 8)
        step = perf_model.step_breakdown(get_model(wl.model), wl, Plan.parse(name), profile)
        assert row["model_compute_comm_s"] == pytest.approx(step.total_s - step.overhead_s)
        assert row["model_rel_error"] == pytest.approx(row["model_compute_comm_s"] / row["measured_per_step_s"] - 1)
        assert row["published_per_step_s"] is None and not row["toy"]  # no published 2-GPU cells
    # the least-waiting rank's time: rank 1 arrived last at every Ulysses all-to-all in this run
    assert rows["u2"]["measured_busbw_gbps"]["ulysses_a2a"] > 200
    not_run = {r["plan"]: r for r in result["not_run"]}
    assert set(not_run) == {"cfg2-u4-hsdp8", "tp8"}
    assert not_run["cfg2-u4-hsdp8"]["published_per_step_s"] == pytest.approx((166.26 - 120.57) / 15, rel=1e-3)
    assert not_run["tp8"]["published_per_step_s"] == pytest.approx((181.31 - 131.26) / 15, rel=1e-3)
    assert not_run["tp8"]["measured_per_step_s"] is None


def test_isolated_bandwidth_comes_from_the_scheme_cases_at_its_degree() -> None:
    microbench = {
        "hardware": {"world": 8},
        "collectives": [{"name": "a2a-u8-qkv", "busbw_gbps": 300.0}, {"name": "a2a-u4-qkv", "busbw_gbps": 1.0}],
        "collectives_groups": [
            {
                "group_size": 4,
                "cases": [{"name": "a2a-u4-qkv", "busbw_gbps": 250.0}, {"name": "a2a-u4-out", "busbw_gbps": 270.0}],
            }
        ],
    }
    assert step_compare.isolated_busbw(microbench, "ulysses_a2a", 4) == 260.0  # the groups of 4, not the whole world's
    assert step_compare.isolated_busbw(microbench, "ulysses_a2a", 8) == 300.0
    assert (
        step_compare.isolated_busbw(microbench, "tp_allreduce", 4) is None
        and step_compare.isolated_busbw(None, "ulysses_a2a", 4) is None
    )
