"""`worldtune calibrate`: measure a GPU type's Profile with micro-benchmarks of the generator's own operations.

Three ways in: run policies/instruments/microbench.py here (needs PyTorch: `pip install 'worldtune[calibrate]'`;
it reads its sizes from the model), convert a raw file a GPU node wrote (--from-raw), or render the SkyPilot task
that runs it on a rented node (--infra CLOUD; --dry-run validates it with SkyPilot offline and prints it): the task
ships the instrument's files and the sizes computed here from the model, as JSON.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import string
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from worldtune.cli import console, emit_json, err_console, fail
from worldtune.tools.words.errors import WorldtuneError

TEMPLATE = Path(__file__).resolve().parent.parent / "sky" / "templates" / "calibrate.yaml"
RAW_BEGIN = "WORLDTUNE-CALIBRATE-RAW-BEGIN"
RAW_END = "WORLDTUNE-CALIBRATE-RAW-END"
TORCH_REQUIREMENT = "torch==2.13.0"  # the `calibrate` extra's pin
MICROBENCH = "worldtune.policies.instruments.microbench"
NODE_DIR = "~/worldtune-calibrate/instruments"  # where the task puts the instrument's files (sky/templates)


def file_mounts() -> dict[str, str]:
    """The instrument's files (plain PyTorch: they run where worldtune is not installed) as the task mounts them."""
    from worldtune.policies.instruments import device_files

    return {f"{NODE_DIR}/{path.name}": str(path) for path in device_files()}


def sizes_json() -> str:
    """The sizes the micro-benchmark runs at, computed here from the model (a bare node cannot import it)."""
    from worldtune.policies.instruments import model_sizes

    return json.dumps(model_sizes.document(variants=["full"]), separators=(",", ":"))


def template_path() -> Path:
    """sky/templates/calibrate.yaml (sky/ is a folder without __init__.py: found through this file)."""
    spec = importlib.util.find_spec("worldtune.sky.home")
    if spec is not None and spec.origin is not None:
        return Path(spec.origin).parent / "templates" / "calibrate.yaml"
    return TEMPLATE


def render_text(gpu: str, count: int, infra: str) -> str:
    """The SkyPilot task YAML (the template filled in) that runs the micro-benchmarks on COUNT GPUs of one node."""
    from worldtune.tools.words.gpus import get_gpu

    spec = get_gpu(gpu)
    return string.Template(template_path().read_text()).substitute(
        name=f"worldtune-calibrate-{spec.name.lower()}-{count}gpu",
        infra=infra,
        gpu=spec.sky_accelerator,
        count=count,
        # JSON texts are YAML flow values: the mounts a mapping, the sizes one double-quoted string
        file_mounts=json.dumps(file_mounts()),
        sizes_json=json.dumps(sizes_json()),
        torch_requirement=TORCH_REQUIREMENT,
        begin_marker=RAW_BEGIN,
        end_marker=RAW_END,
    )


def render_task(gpu: str, count: int, infra: str) -> dict[str, Any]:
    """The same task as a dict (what SkyPilot's Task.from_yaml_config reads)."""
    import yaml

    task: dict[str, Any] = yaml.safe_load(render_text(gpu, count, infra))
    return task


def validate_task(task: dict[str, Any]) -> None:
    """SkyPilot's own schema and resource checks on a copy of the task (offline, usage collection off)."""
    import copy

    from worldtune.sky.home import chosen_home, import_skypilot
    from worldtune.tools.words.errors import InvalidInput

    sky = import_skypilot(chosen_home(dry_run=True), "worldtune calibrate --infra (validating the task)")
    from sky import exceptions

    try:
        sky.Task.from_yaml_config(copy.deepcopy(task))
    except (ValueError, exceptions.InvalidSkyPilotConfigError) as exc:
        raise InvalidInput("task", task.get("name"), "a task SkyPilot accepts", str(exc)) from exc


def extract_raw(log_text: str) -> str:
    """The raw JSON the task printed between its markers (from `sky logs CLUSTER > log`)."""
    from worldtune.tools.words.errors import InvalidInput

    # SkyPilot prefixes each job-log line with "(task-name, pid=N) ": drop it
    lines = [
        line.split(") ", 1)[1] if line.startswith("(") and ") " in line else line for line in log_text.splitlines()
    ]
    starts = [i for i, line in enumerate(lines) if line.strip() == RAW_BEGIN]
    ends = [i for i, line in enumerate(lines) if line.strip() == RAW_END]
    if not starts or not ends or ends[-1] < starts[-1]:
        raise InvalidInput("log", f"{len(log_text)} characters", f"a job log with {RAW_BEGIN} ... {RAW_END}")
    return "\n".join(lines[starts[-1] + 1 : ends[-1]]).strip() + "\n"


def raw_from_file(path: Path) -> Path:
    """A raw JSON file as given, or the raw JSON cut out of a job log (written beside it as NAME.raw.json)."""
    if not path.is_file():
        return path  # load_raw names the problem
    text = path.read_text(errors="replace")
    if RAW_BEGIN not in text:
        return path
    raw = path.with_name(path.stem + ".raw.json")
    raw.write_text(extract_raw(text))
    return raw


def run_microbench(raw_out: Path, world: int | None, tiny: bool, device: str, mechanisms: bool = False) -> None:
    """Run the micro-benchmarks in a child process (it spawns one process per GPU)."""
    if importlib.util.find_spec("torch") is None:
        from worldtune.tools.words.errors import InvalidInput

        raise InvalidInput(
            "torch",
            "not installed",
            "PyTorch for the local micro-benchmarks",
            "pip install 'worldtune[calibrate]', or use --from-raw FILE or --infra CLOUD",
        )
    argv = [sys.executable, "-m", MICROBENCH, "--out", str(raw_out), "--device", device]
    if world is not None:
        argv += ["--world", str(world)]
    if tiny:
        argv.append("--tiny")
    if mechanisms:
        argv.append("--mechanisms")
    from worldtune.policies.instruments.devkit import MULTICAST_OFF_ENV

    env = {**os.environ, **MULTICAST_OFF_ENV}
    # progress goes to stderr: stdout carries only the result (--json promises that)
    done = subprocess.run(argv, env=env, check=False, stdout=sys.stderr)
    if done.returncode != 0:
        from worldtune.tools.words.errors import InvalidInput

        raise InvalidInput("microbench", f"exit status {done.returncode}", "a completed run", " ".join(argv))


def register(app: typer.Typer) -> None:
    """Add `worldtune calibrate` to the app."""

    @app.command()
    def calibrate(
        gpu: Annotated[str, typer.Option(help="GPU type being measured (H200, B200, H100, B300)")] = "H200",
        out: Annotated[str | None, typer.Option(help="profile YAML to write (default: GPU-Ngpu-DATE.yaml)")] = None,
        from_raw: Annotated[str | None, typer.Option("--from-raw", help="convert this raw JSON; no run")] = None,
        world: Annotated[int | None, typer.Option(help="GPUs to use (default: 1; 2+ also times NCCL)")] = None,
        tiny: Annotated[
            bool, typer.Option("--tiny", help="toy shapes: checks the code path, calibrates nothing")
        ] = False,
        device: Annotated[str, typer.Option(help="cuda | cpu (cpu only with --tiny)")] = "cuda",
        infra: Annotated[str | None, typer.Option(help="render a SkyPilot task for this infra (e.g. nebius)")] = None,
        gpus: Annotated[int, typer.Option(help="GPUs on the rented node (--infra)")] = 2,
        dry_run: Annotated[bool, typer.Option("--dry-run", help="with --infra: validate and print the task")] = False,
        mechanisms: Annotated[
            bool, typer.Option("--mechanisms", help="also measure ring, Ulysses packing, FP8, SDPA backends, VAE")
        ] = False,
        from_mech: Annotated[
            str | None, typer.Option("--from-mech", help="with --from-raw: a mechbench.py JSON to read too")
        ] = None,
        as_json: Annotated[bool, typer.Option("--json", help="print JSON for scripts")] = False,
    ) -> None:
        """Measure a Profile for a GPU type from micro-benchmarks of the generator's operations (no model download)."""
        from worldtune.tools.words.errors import InvalidInput
        from worldtune.tools.words.gpus import get_gpu

        try:
            spec = get_gpu(gpu)
            if device not in ("cuda", "cpu"):
                raise InvalidInput("device", device, "cuda or cpu")
            if device == "cpu" and not tiny:
                raise InvalidInput("device", device, "cpu only with --tiny", "the full shapes need a GPU")
            if infra is not None:
                _render(spec.name, gpus, infra, dry_run, out, as_json)
                return
            if dry_run:
                raise InvalidInput("dry-run", True, "only with --infra CLOUD")
            if from_mech is not None and from_raw is None:
                raise InvalidInput("from-mech", from_mech, "only with --from-raw (a run measures with --mechanisms)")
            _calibrate(spec.name, out, from_raw, world, tiny, device, as_json, mechanisms, from_mech)
        except (WorldtuneError, ValueError) as exc:
            raise fail(exc, as_json, {"gpu": gpu}) from exc


def _render(gpu: str, count: int, infra: str, dry_run: bool, out: str | None, as_json: bool) -> None:
    from worldtune.tools.words.errors import InvalidInput

    if count < 1 or count > 8:
        raise InvalidInput("gpus", count, "1 to 8 GPUs of one node")
    text = render_text(gpu, count, infra)
    task = render_task(gpu, count, infra)
    validate_task(task)
    path = Path(out) if out else None
    if path is not None and not dry_run:
        path.write_text(text)
    cluster = task["name"]
    steps = [
        f"sky launch -c {cluster} {path or 'calibrate.yaml'} --down -y",
        f"sky logs {cluster} 1 > {cluster}.log   # the raw JSON sits between {RAW_BEGIN} and {RAW_END}",
        f"worldtune calibrate --gpu {gpu} --from-raw {cluster}.log   # a job log or the raw JSON itself",
    ]
    if as_json:
        emit_json({"task": task, "validated": True, "written": None if dry_run else str(path), "next": steps})
        return
    sys.stdout.write(text)
    err_console.print(f"[green]validated by SkyPilot[/] ({'dry run: nothing launched' if dry_run else 'written'})")
    for step in steps:
        err_console.print(f"  {step}")


def _calibrate(
    gpu: str,
    out: str | None,
    from_raw: str | None,
    world: int | None,
    tiny: bool,
    device: str,
    as_json: bool,
    mechanisms: bool = False,
    from_mech: str | None = None,
) -> None:
    from worldtune.policies import gpu_calibration
    from worldtune.policies.instruments.microbench import mechanisms_path
    from worldtune.policies.mech_terms import load_mech
    from worldtune.tools.store.db_path import check_out_file

    if out is not None:  # before a minute of measuring, not after it
        try:
            check_out_file(out)
        except WorldtuneError as exc:
            raise fail(exc, as_json) from exc
    workdir = Path.cwd()
    mech_path = Path(from_mech) if from_mech else None
    if from_raw is None:
        scratch = workdir / f".worldtune-calibrate-{os.getpid()}.raw.json"
        run_microbench(scratch, world, tiny, device, mechanisms)
        raw_path = scratch
        mech_path = mechanisms_path(scratch) if mechanisms else None
    else:
        raw_path = raw_from_file(Path(from_raw))
    raw = gpu_calibration.load_raw(raw_path)
    stem = gpu_calibration.profile_name(raw, gpu)
    profile_path = Path(out) if out else workdir / f"{stem}.yaml"
    kept_raw = profile_path.with_name(profile_path.stem + ".raw.json")
    if from_raw is None:
        shutil.move(raw_path, kept_raw)
    profile = gpu_calibration.measured_profile(raw, gpu, raw_name=kept_raw.name if from_raw is None else raw_path.name)
    if mech_path is not None:
        mech = load_mech(mech_path)
        if from_raw is None:  # keep the measurement beside the profile, as the raw file is
            kept_mech = profile_path.with_name(profile_path.stem + ".mech.json")
            shutil.move(mech_path, kept_mech)
            mech_path = kept_mech
        profile = gpu_calibration.with_mechanisms(profile, mech, mech_path.name)
    profile.dump(profile_path)
    summary = gpu_calibration.comparison(profile, raw)
    summary["profile"] = str(profile_path)
    if as_json:
        emit_json(summary)
        return
    _print_summary(summary)


def _print_summary(s: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table(title=f"{s['gpu']} measured profile -> {s['profile']}", show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    for key, value in s["rates"].items():
        table.add_row(key, "-" if value is None else f"{value:,.2f}")
    measured = s.get("measured_single_gpu_step") or {}
    if measured:
        table.add_row("one GPU per step, measured ops (s)", f"{measured['per_step_s']:.2f}")
    table.add_row("one GPU per step, model (s)", f"{s['model_single_gpu_step']['per_step_s']:.2f}")
    if s["floor_step_s"] is not None:
        table.add_row("published floor per step (s)", f"{s['floor_step_s']:.2f}")
    for cell in s["cells"]:
        table.add_row(
            cell["cell"], f"{cell['predicted_s']:.1f} s vs {cell['published_s']:.1f} ({cell['rel_error']:+.1%})"
        )
    console.print(table)
    console.print(f"[dim]{s['hardware']}[/]")
