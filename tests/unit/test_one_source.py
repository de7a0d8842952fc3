"""One source of truth for values that were written several times (issue 16): the anchor clip, the
NVLink-multicast-off environment, the progress callback type, and the shapes and byte counts the GPU instruments
run at (the model's, imported or handed to a bare GPU node as JSON). Each is defined once and read elsewhere."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
import yaml

from worldtune.policies import perf_model
from worldtune.policies.instruments import LOCAL_ONLY, device_files, devkit, microbench, model_sizes, shapes, step_plan
from worldtune.tools.bench import benchmark
from worldtune.tools.plans.estimate import resolve_profile
from worldtune.tools.words import deployment, memory, models, plan_rules
from worldtune.tools.words.plan import Plan
from worldtune.tools.words.workload import Workload, anchor_workload

ROOT = Path(__file__).resolve().parents[2]
SETS_MULTICAST_OFF = re.compile(r"""["']NCCL_NVLS_ENABLE["']\s*[:,]\s*["']0["']""")


def test_the_anchor_clip_is_written_once() -> None:
    clip = (models.ANCHOR_WIDTH, models.ANCHOR_HEIGHT, models.ANCHOR_FRAMES)
    assert clip == (1280, 720, 189)  # REFERENCE section 4
    default = Workload()
    assert (default.width, default.height, default.num_frames) == clip
    anchor = anchor_workload("cosmos3-super")
    assert (anchor.width, anchor.height, anchor.num_frames) == clip
    assert perf_model.ANCHOR_PIXELS_X_FRAMES == 1280 * 720 * 189


def test_the_memory_of_a_plan_is_defined_once_for_the_rules_and_the_model() -> None:
    """tools/words/memory.py (a word) holds the bytes a plan holds per GPU; the plan rules' memory fit and the
    performance model read that one definition (the rules no longer import the model)."""
    assert perf_model.memory_breakdown is memory.memory_breakdown is plan_rules.memory_breakdown
    assert perf_model.MemoryBreakdown is memory.MemoryBreakdown
    assert perf_model.ANCHOR_PIXELS_X_FRAMES is memory.ANCHOR_PIXELS_X_FRAMES
    assigned = sorted(
        f"{path.relative_to(ROOT)}: {target.id}"
        for room in ("tools", "policies", "sky", "agent")
        for path in (ROOT / room).rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name) and target.id in {"BYTES_BF16", "ANCHOR_PIXELS_X_FRAMES"}
    )
    assert assigned == ["tools/words/memory.py: ANCHOR_PIXELS_X_FRAMES", "tools/words/memory.py: BYTES_BF16"], assigned
    wl, plan = anchor_workload(), Plan.parse("cfg2-u4-hsdp8")
    spec, profile = models.get_model(wl.model), resolve_profile("H200")
    predicted = perf_model.predict(wl, plan, profile).memory
    assert predicted == memory.memory_breakdown(spec, wl, plan, profile) and predicted.total_gib > 0


def test_multicast_off_is_defined_once_and_the_task_template_matches_it() -> None:
    template = yaml.safe_load((ROOT / "sky" / "templates" / "calibrate.yaml").read_text())
    assert devkit.MULTICAST_OFF_ENV.items() <= {k: str(v) for k, v in template["envs"].items()}.items()
    writers = sorted(
        str(path.relative_to(ROOT))
        for room in ("tools", "policies", "sky", "agent", "worldtune", "benchmarks", "scripts")
        for path in (ROOT / room).rglob("*.py")
        if SETS_MULTICAST_OFF.search(path.read_text())
    )
    assert writers == ["policies/instruments/devkit.py"], writers


def test_the_multicast_check_can_fail() -> None:
    assert SETS_MULTICAST_OFF.search('env = {"NCCL_NVLS_ENABLE": "0"}')
    assert SETS_MULTICAST_OFF.search('(("NCCL_NVLS_ENABLE", "0"),)')
    assert not SETS_MULTICAST_OFF.search("hw.get('nccl_env', {}).get('NCCL_NVLS_ENABLE') == '0'")


def test_progress_is_one_type() -> None:
    assert benchmark.Progress is deployment.Progress


def test_validation_errors_have_one_formatter_for_the_cli_and_mcp() -> None:
    import pytest
    from pydantic import ValidationError

    from worldtune.tools.mcp import common as mcp_common
    from worldtune.tools.words.errors import describe

    with pytest.raises(ValidationError) as caught:
        anchor_workload("cosmos3-super", width=832)  # a worldtune refusal raised inside Workload's validator
    text = describe(caught.value)
    assert text.startswith("size='832x720' is not valid") and "Value error" not in text, text
    assert not hasattr(mcp_common, "validation_message")


# ---- the instruments' sizes are the model's (issue 16 item 6) ---------------------------------------------------
MODEL_NUMBERS = {5120, 25600, 44160, 48256, 487_587_840}  # Cosmos3-Super's hidden, FFN, tokens, keys, layer weights


def test_the_instruments_run_at_the_models_shapes_and_bytes() -> None:
    tower, wl = models.get_model("cosmos3-super").generator, anchor_workload()
    full = microbench.FULL
    layer = full.layer
    assert (layer.hidden, layer.q_heads, layer.kv_heads, layer.head_dim, layer.ffn) == (
        tower.hidden, tower.q_heads, tower.kv_heads, tower.head_dim, tower.ffn)  # fmt: skip
    assert layer.params == tower.params_per_layer and full.layers == tower.layers  # the matrices built = the count
    assert (full.video_tokens, full.prompt_tokens) == (wl.video_tokens, wl.prompt_tokens)
    assert full.latent == perf_model.vae_latent(wl) and full.latent_channels == perf_model.LATENT_CHANNELS
    assert list(full.vae_tiles) == perf_model.vae_tile_shapes(*full.latent[1:])
    assert full.vae_tile == (perf_model.VAE_TILE_LATENT, perf_model.VAE_TILE_STRIDE)
    for degree in shapes.SP_DEGREES:
        tokens = -(-wl.video_tokens // degree)
        assert microbench.ulysses_bytes(full, degree) == perf_model.ulysses_bytes(tower, tokens)
    assert microbench.tp_allreduce_bytes(full, 2) == perf_model.tp_allreduce_bytes(tower, wl.video_tokens // 2)
    assert microbench.hsdp_gather_bytes(full, 1) == perf_model.hsdp_gather_bytes(tower, fp8=True)
    assert microbench.cfg_gather_bytes(full) == perf_model.cfg_gather_bytes(wl.video_tokens)
    for collective in ("a2a", "allreduce", "allgather"):
        for world in range(1, model_sizes.MAX_RANKS + 1):
            rule = perf_model.bus_bytes(collective, 10**9, world)
            assert full.bus_bytes(collective, 10**9, world) == pytest.approx(rule, rel=1e-15)


def test_the_sizes_follow_the_model_when_it_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Read from the model, not copied: change a definition there and the instruments' numbers change with it."""
    before = model_sizes.variant("full")
    monkeypatch.setattr(memory, "BYTES_BF16", 1)  # the word's definition, which the model's byte formulas read
    monkeypatch.setattr(perf_model, "LATENT_CHANNELS", 32)
    after = model_sizes.variant("full")
    cases = {c["name"]: c["buffer_bytes"] for c in before["cases"]}
    changed = {c["name"]: c["buffer_bytes"] for c in after["cases"]}
    assert changed["a2a-u4-qkv"] * 2 == cases["a2a-u4-qkv"] and changed["allreduce-sp1"] * 2 == cases["allreduce-sp1"]
    assert changed["allgather-cfg"] * 4 == cases["allgather-cfg"] and after["latent_channels"] == 32
    assert changed["allgather-hsdp-fp8"] == cases["allgather-hsdp-fp8"]  # one byte a weight either way


def test_no_instrument_writes_the_models_numbers() -> None:
    """The device files hold no shape or size of the model as a number in code (docstrings may quote them)."""
    found = []
    for path in device_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and type(node.value) is int and node.value in MODEL_NUMBERS:
                found.append(f"{path.name}:{node.lineno}: {node.value}")
    assert not found, found


def test_a_bare_node_reads_the_same_sizes_from_the_json_file(tmp_path: Path) -> None:
    path = tmp_path / "sizes.json"
    assert model_sizes.main(["--out", str(path), "--plans", "cfg2-u4-hsdp8,u4-cfg2,tp8"]) == 0
    for variant in shapes.VARIANTS:
        read, imported = shapes.read(path, variant), devkit.sizes_for(None, variant)
        assert {**asdict(read), "source": "", "plans": {}} == {**asdict(imported), "source": "", "plans": {}}
    full = shapes.read(path, "full")
    assert full.plans["u4-cfg2"] == full.plans["cfg2-u4"] == model_sizes.step_plan("cfg2-u4")
    assert full.plans["cfg2-u4-hsdp8"]["world"] == Plan.parse("cfg2-u4-hsdp8").world_size == 8


def test_the_calibration_task_carries_the_models_sizes() -> None:
    from worldtune.cli_calibrate import render_task

    task = render_task("H200", 8, "nebius")
    doc = json.loads(task["envs"]["WORLDTUNE_SIZES"])
    assert doc == model_sizes.document(variants=["full"])
    assert "--sizes sizes.json" in task["run"] and "$WORLDTUNE_SIZES" in task["run"]
    assert sorted(Path(p).name for p in task["file_mounts"].values()) == sorted(p.name for p in device_files())


def _device_imports(path: Path) -> tuple[set[str], set[str], set[str]]:
    """(absolute modules, sibling modules, siblings imported only under `except ImportError`) of a device file."""
    tree = ast.parse(path.read_text())
    guarded: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
            isinstance(h.type, ast.Name) and h.type.id == "ImportError" for h in node.handlers
        ):
            guarded |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    absolute, siblings, optional = set(), set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            absolute |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            absolute.add(node.module.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            names = [node.module] if node.module else [a.name for a in node.names]
            (optional if id(node) in guarded else siblings).update(names)
    return absolute, siblings, optional


def test_device_files_need_only_the_standard_library_and_each_other() -> None:
    """What `worldtune calibrate --infra` ships runs on a node with torch alone: no worldtune, no pydantic; torch
    is imported by name when first needed; the local side is reached only under `except ImportError`."""
    names = {p.stem for p in device_files()}
    assert names and not {p.removesuffix(".py") for p in LOCAL_ONLY} & names
    for path in device_files():
        absolute, siblings, optional = _device_imports(path)
        assert absolute <= set(sys.stdlib_module_names), (path.name, absolute - set(sys.stdlib_module_names))
        assert siblings <= names, (path.name, siblings - names)
        assert optional <= {"model_sizes"}, (path.name, optional)


def test_the_generator_step_parses_plans_with_tools_plan() -> None:
    for text in ("cfg2-u4-hsdp8", "u4-cfg2", "tp8", "hsdp4", "1gpu"):
        plan, parsed = Plan.parse(text), step_plan.parse_plan(text, microbench.FULL)
        assert (parsed.name, parsed.world, parsed.cfg, parsed.ulysses, parsed.tp, parsed.hsdp) == (
            str(plan), plan.world_size, plan.cfg, plan.ulysses, plan.tp, plan.hsdp)  # fmt: skip
    assert not hasattr(step_plan, "PLAN_TOKEN") and not hasattr(step_plan, "PLAN_GRAMMAR")  # no grammar of its own


# ---- a bare GPU node, simulated: only the device files and the sizes file, worldtune unimportable --------------
NO_WORLDTUNE = """import sys
class _Bare:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.split(".")[0] in ("worldtune", "pydantic"):
            raise ModuleNotFoundError(f"No module named {name!r} (a bare node)")
sys.meta_path.insert(0, _Bare)
"""


def _bare(tmp_path: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": str(tmp_path / "site"), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    return subprocess.run([sys.executable, *argv], cwd=tmp_path / "node", env=env, capture_output=True, text=True,
                          timeout=240, check=False)  # fmt: skip


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_a_bare_node_runs_the_instruments_from_the_sizes_file(tmp_path: Path) -> None:
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(NO_WORLDTUNE)
    node = tmp_path / "node"
    for folder, files in (
        ("policies/instruments", device_files()),
        ("benchmarks", [ROOT / "benchmarks/generator_step.py", ROOT / "benchmarks/_run_clock.py"]),  # its run's stamp
    ):
        (node / folder).mkdir(parents=True)
        for file in files:
            (node / folder / file.name).write_text(file.read_text())
    model_sizes.main(["--out", str(node / "sizes.json"), "--plans", "cfg2,tp2"])
    refused = _bare(tmp_path, ["policies/instruments/microbench.py", "--out", "r.json", "--tiny", "--device", "cpu"])
    assert refused.returncode != 0 and "--sizes FILE" in refused.stderr, refused.stderr[-2000:]
    done = _bare(tmp_path, ["policies/instruments/microbench.py", "--sizes", "sizes.json", "--out", "r.json",
                            "--tiny", "--device", "cpu", "--reps", "1", "--warmup", "0"])  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    raw: dict[str, Any] = json.loads((node / "r.json").read_text())
    assert raw["complete"] and raw["sizes"]["from"] == "sizes file sizes.json"
    assert raw["sizes"]["layer_params"] == model_sizes.TOYS["tiny"].tower.params_per_layer
    step = _bare(tmp_path, ["benchmarks/generator_step.py", "--sizes", "sizes.json", "--tiny", "--device", "cpu",
                            "--world", "2", "--plans", "cfg2", "--layers", "2", "--reps", "1",
                            "--out", "g.json"])  # fmt: skip
    assert step.returncode == 0, step.stderr[-3000:]
    assert json.loads((node / "g.json").read_text())["plans"][0]["plan"] == "cfg2"
    unknown = _bare(tmp_path, ["benchmarks/generator_step.py", "--sizes", "sizes.json", "--tiny", "--device", "cpu",
                               "--plans", "u2", "--out", "g.json"])  # fmt: skip
    assert unknown.returncode == 2 and "not in the sizes file" in unknown.stderr
