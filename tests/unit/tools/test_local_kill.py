"""A local teardown returns once its twin processes are down, not when the signal is sent.

The fault-injection benchmark once found a twin alive right after `gc` with its ledger row closed: a twin that
outlives SIGTERM's grace (a uvicorn server finishing a request) is SIGKILLed, and a killed process lives on while
the kernel takes it down (longer for a larger one, and on a busy machine). The process here is a real one that
ignores SIGTERM and holds 512 MiB, started by the test, not by the backend (as gc finds a dead run's twins).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from worldtune.tools.backends import local
from worldtune.tools.store import owners
from worldtune.tools.store.database import Store

STUBBORN = (
    "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "held = bytearray(512 * 2**20); print('up', flush=True); time.sleep(120)"
)


def test_a_twin_that_ignores_sigterm_is_down_when_the_teardown_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local, "STOP_GRACE_S", 0.2)  # SIGTERM's grace; the wait after SIGKILL is not shortened
    # its command line names a twin, as `worldtune twin` does: the backend signals nothing else
    child = subprocess.Popen([sys.executable, "-c", STUBBORN, "worldtune", "twin"], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "up"
        assert local._is_our_twin(child.pid) and child.pid not in local._CHILDREN
        backend = local.LocalBackend(Store(tmp_path / "w.db"), log_dir=tmp_path / "logs")
        backend._kill(0, {child.pid: owners.start_time(child.pid)})
        assert local._state_of(child.pid) in (None, "Z")  # down (a zombie until its parent, this test, reaps it)
    finally:
        child.kill()
        child.wait()
