"""The real vLLM-Omni 0.30.0 in the tests: where it is installed (scripts/engine-setup.sh), the environment it runs
in here (offline, the test-only CPU platform of tests/real_engine/cpu_platform on its path), and its processes.

The engine is never optional: when it is not installed these tests FAIL (pytest.fail), naming the command that
installs it; scripts/test.sh installs it before any test runs.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENGINE_VENV = Path(os.environ.get("WORLDTUNE_ENGINE_VENV", "/opt/worldtune/engine-vllm-omni-0.30.0"))
REAL_ENGINE_DIR = ROOT / "tests" / "real_engine"
CPU_PLATFORM_DIR = REAL_ENGINE_DIR / "cpu_platform"


def engine_python() -> Path:
    """The real engine's interpreter; the test fails (never skips) when it is not installed."""
    python = ENGINE_VENV / "bin" / "python"
    stamp = ENGINE_VENV / ".worldtune-engine"
    if not python.is_file() or not stamp.is_file():
        pytest.fail(
            f"the real vLLM-Omni engine is not installed in {ENGINE_VENV}: run `bash scripts/engine-setup.sh` "
            "(scripts/test.sh does it before the tests)",
            pytrace=False,
        )
    return python


def engine_bin(name: str) -> Path:
    return engine_python().parent / name


def engine_env(cpu_ranks: int = 1, **extra: str) -> dict[str, str]:
    """The environment of a real-engine process here: no traffic beyond loopback (the hub, usage stats), the
    test-only CPU platform found through its entry points, `cpu_ranks` CPU "devices"."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONHOME"))}
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        VLLM_NO_USAGE_STATS="1",
        VLLM_DO_NOT_TRACK="1",
        DO_NOT_TRACK="1",
        TOKENIZERS_PARALLELISM="false",
        OMP_NUM_THREADS="1",
        PYTHONPATH=str(CPU_PLATFORM_DIR),
        WORLDTUNE_CPU_RANKS=str(cpu_ranks),
        PATH=f"{engine_python().parent}:{env.get('PATH', '')}",
    )
    env.update(extra)
    return env


def run_engine_script(script: str, stdin: Any, timeout: float, **env: str) -> Any:
    """Run tests/real_engine/SCRIPT under the real engine's Python with JSON on stdin; its last stdout line, parsed."""
    done = subprocess.run(
        [str(engine_python()), str(REAL_ENGINE_DIR / script)],
        input=json.dumps(stdin),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=engine_env(**env),
        cwd=ROOT,
    )
    if done.returncode != 0:
        pytest.fail(f"{script} exited {done.returncode}:\n{done.stderr[-3000:]}", pytrace=False)
    return json.loads(done.stdout.strip().splitlines()[-1])
