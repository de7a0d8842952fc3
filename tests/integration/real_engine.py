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


def run_engine_script(script: str, stdin: Any, timeout: float, argv: list[str] | None = None, **env: str) -> Any:
    """Run tests/real_engine/SCRIPT under the real engine's Python with JSON on stdin; its last stdout line, parsed."""
    done = subprocess.run(
        [str(engine_python()), str(REAL_ENGINE_DIR / script), *(argv or [])],
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


# ---- a tiny Cosmos3 checkpoint and the real server on it --------------------------------------------------------
KEY = "real-engine-test-key"
BUILDER = REAL_ENGINE_DIR / "tiny_cosmos3.py"


def tiny_cosmos3() -> Path:
    """The tiny random-weight Cosmos3 checkpoint (tests/real_engine/tiny_cosmos3.py), built once per version of its
    builder under .cache/ and shared by the test workers (built aside, then renamed into place)."""
    import hashlib
    import shutil
    import tempfile

    digest = hashlib.sha256(BUILDER.read_bytes()).hexdigest()[:12]
    folder = ROOT / ".cache" / f"tiny-cosmos3-{digest}"
    if (folder / "model_index.json").is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    aside = Path(tempfile.mkdtemp(prefix="tiny-cosmos3-", dir=folder.parent))
    run_engine_script("tiny_cosmos3.py", None, timeout=600, argv=[str(aside / "model")])
    try:
        (aside / "model").rename(folder)
    except OSError:  # another worker put it there first
        if not (folder / "model_index.json").is_file():
            raise
    shutil.rmtree(aside, ignore_errors=True)
    return folder


class RealServer:
    """`vllm serve CHECKPOINT --omni` of the real vLLM-Omni 0.30.0 on `ranks` CPU ranks, on a free loopback port, with
    the stage profiler, guardrails off and an API key, as worldtune renders it; its own process group."""

    def __init__(self, checkpoint: Path, log: Path, *flags: str, ranks: int = 1, key: str = KEY) -> None:
        from worldtune.tools.backends.local import free_port

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.argv = [
            str(engine_bin("vllm")), "serve", str(checkpoint), "--omni", "--host", "127.0.0.1", "--port",
            str(self.port), "--enable-diffusion-pipeline-profiler", "--no-guardrails", "--api-key", key, *flags,
        ]  # fmt: skip
        self.ranks = ranks
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> RealServer:
        import time

        import httpx

        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=engine_env(cpu_ranks=self.ranks), start_new_session=True, cwd=ROOT,
            )  # fmt: skip
        began = time.monotonic()
        bound = 900.0  # a loaded 2-core machine: ready in 18-125 s here; the bound only stops a hung start
        while True:
            if self.proc.poll() is not None:
                self.__exit__()
                pytest.fail(
                    f"the real server exited {self.proc.returncode} before ready:\n{self.tail()}", pytrace=False
                )
            try:
                if httpx.get(f"{self.url}/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() - began > bound:
                self.__exit__()
                pytest.fail(f"the real server was not ready in {bound:.0f} s:\n{self.tail()}", pytrace=False)
            time.sleep(0.5)
        self.ready_s = time.monotonic() - began
        return self

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def __exit__(self, *exc: object) -> None:
        import signal

        if self.proc is None:
            return
        for sig, grace in ((signal.SIGTERM, 30), (signal.SIGKILL, 30)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout=grace)
                break
            except subprocess.TimeoutExpired:
                continue
        # nothing of its group left (its diffusion workers are in it)
        try:
            os.killpg(self.proc.pid, 0)
        except ProcessLookupError:
            return
        os.killpg(self.proc.pid, signal.SIGKILL)
