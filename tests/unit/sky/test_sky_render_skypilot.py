"""`worldtune deploy --dry-run` as a user runs it: SkyPilot's own validation and optimizer, offline, in a private home.

Each test runs the installed CLI (or a short Python child) with WORLDTUNE_SKY_HOME pointing at a
temporary SkyPilot home, so SkyPilot imports there, reads only the catalog rows worldtune wrote from
its snapshot, and never touches ~/.sky. Usage collection is off.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

WORLDTUNE = str(Path(sys.executable).parent / "worldtune")
PROFILER = "--enable-diffusion-pipeline-profiler"
RECIPE = "--cfg-parallel-size 2 --ulysses-degree 4 --use-hsdp --hsdp-shard-size 8 --init-timeout 1800"


def run(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "WORLDTUNE_SKY_HOME": str(tmp_path / "sky-home"), "SKYPILOT_DISABLE_USAGE_COLLECTION": "1",
            "WORLDTUNE_DB": str(tmp_path / "wt.db"), **(env or {})}  # fmt: skip
    full.pop("HF_TOKEN", None)
    return subprocess.run(
        [WORLDTUNE, *args], capture_output=True, text=True, timeout=120, env=full, stdin=subprocess.DEVNULL
    )


@pytest.mark.parametrize(
    ("gpu", "plan", "price", "servers", "flags"),
    [
        ("H200", "cfg2-u4-hsdp8", 28.0, 1, f"{RECIPE} {PROFILER} --no-guardrails"),
        ("B200", "tp8", 44.0, 1, f"--tensor-parallel-size 8 --init-timeout 1800 {PROFILER} --no-guardrails"),
        ("B200", "8x1gpu", 44.0, 8, f"--init-timeout 1800 {PROFILER} --no-guardrails"),
    ],
)
def test_dry_run_passes_skypilot_validation_and_names_the_cheapest_offer(
    tmp_path: Path, gpu: str, plan: str, price: float, servers: int, flags: str
) -> None:
    out = run(tmp_path, "deploy", "--gpu", gpu, "--plan", plan, "--infra", "nebius", "--dry-run",
              "--out", str(tmp_path / "out"), "--json")  # fmt: skip
    assert out.returncode == 0, out.stderr + out.stdout
    data = json.loads(out.stdout)
    assert data["validated_by"] == ["sky.Task.from_yaml_config", "sky optimizer (offline catalog)"]
    assert data["optimizer"]["cloud"] == "nebius" and data["optimizer"]["accelerators"] == f"{gpu}:8"
    assert data["optimizer"]["usd_per_hour"] == price == data["usd_per_hour"]
    commands = data["serve_commands"]
    # every public server takes the API key from its SkyPilot secret, after the plan's flags
    assert len(commands) == servers and all(c.endswith(f'{flags} --api-key "$WORLDTUNE_API_KEY"') for c in commands)
    assert len({c.split("--port ")[1].split()[0] for c in commands}) == servers
    written = yaml.safe_load((tmp_path / "out" / "task.yaml").read_text())
    assert written == data["task"]
    assert (tmp_path / "sky-home" / ".sky" / "catalogs" / "v8" / "nebius" / "vms.csv").is_file()
    if plan == "cfg2-u4-hsdp8":  # the human-readable form once: task, commands, the pick and its price
        human = run(tmp_path, "deploy", "--gpu", gpu, "--plan", plan, "--infra", "nebius", "--dry-run")
        assert human.returncode == 0 and f"${price:.2f}/h" in human.stdout and RECIPE in human.stdout


def test_dry_run_spot_and_serverless(tmp_path: Path) -> None:
    spot = run(tmp_path, "deploy", "--plan", "cfg2-u4-hsdp8", "--capacity", "spot", "--dry-run", "--json")
    assert spot.returncode == 0, spot.stderr
    choice = json.loads(spot.stdout)["optimizer"]
    assert choice["use_spot"] is True and choice["usd_per_hour"] == 11.6
    svc = run(tmp_path, "deploy", "--plan", "8x1gpu", "--capacity", "serverless", "--dry-run", "--json",
              "--out", str(tmp_path / "svc"))  # fmt: skip
    assert svc.returncode == 0, svc.stderr
    data = json.loads(svc.stdout)
    assert data["kind"] == "skyserve-service" and data["cold_start_s"] > 300
    service = yaml.safe_load((tmp_path / "svc" / "service.yaml").read_text())
    assert service["service"]["replica_policy"]["min_replicas"] == 0
    assert data["optimizer"]["accelerators"] == "H200:1" and data["optimizer"]["usd_per_hour"] == 3.5


def test_skypilot_refuses_a_broken_task_and_worldtune_says_why(tmp_path: Path) -> None:
    code = (
        "from pathlib import Path; import os\n"
        "from worldtune.sky import home\n"
        "home.import_skypilot(Path(os.environ['WORLDTUNE_SKY_HOME']))\n"
        "from worldtune.sky.dryrun import validate_task\n"
        "from worldtune.tools.words.errors import InvalidInput\n"
        "cfg = {'name': 'x', 'resources': {'accelerators': 'H200:8', 'use_spott': True}, 'run': 'true'}\n"
        "try:\n    validate_task(cfg)\nexcept InvalidInput as e:\n    print('REFUSED', e.field, e.hint)\n"
        "ok = validate_task({'name': 'y', 'resources': {'accelerators': 'H200:8'}, 'run': 'true'})\n"
        "print('OK', type(ok).__name__)\n"
    )
    env = {**os.environ, "WORLDTUNE_SKY_HOME": str(tmp_path / "h"), "SKYPILOT_DISABLE_USAGE_COLLECTION": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert "REFUSED task" in out.stdout and "use_spott" in out.stdout and "OK Task" in out.stdout


def test_paid_launch_without_yes_is_refused_after_showing_the_price(tmp_path: Path) -> None:
    out = run(tmp_path, "deploy", "--gpu", "H200", "--plan", "cfg2-u4-hsdp8", "--infra", "nebius")
    assert out.returncode == 2
    assert "$28.00/h" in out.stdout and "--yes" in out.stderr
    ledger = subprocess.run([sys.executable, "-c", "import sys; from worldtune.tools.store.database import Store; "
                             "print(len(Store(sys.argv[1]).ledger()))", str(tmp_path / "wt.db")],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert ledger.stdout.strip() == "0"


def test_invalid_plan_is_refused_before_skypilot(tmp_path: Path) -> None:
    out = run(tmp_path, "deploy", "--gpu", "H200", "--plan", "tp8-hsdp8", "--dry-run", "--json")
    assert out.returncode == 2
    assert json.loads(out.stdout)["valid"] is False and "HSDP" in out.stdout
