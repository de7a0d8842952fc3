"""SkyPilot's log lines never reach worldtune's stdout, which carries `--json` answers and the MCP stdio protocol.

A `worldtune deploy --json` whose SkyPilot call started the API server printed SkyPilot's "Failed to connect to
SkyPilot API server ... Starting a local server." ahead of its JSON (found when the Slurm tests' CLI deploy ran
first). Runs in a fresh process: SkyPilot sets up its loggers once, at import.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

# not importorskip: importing SkyPilot here would fix its home for this process (sky/home.py refuses a second one)
pytestmark = pytest.mark.skipif(importlib.util.find_spec("sky") is None, reason="needs the 'sky' extra")

PROGRAM = """
import logging
from worldtune.sky.home import import_skypilot
import_skypilot(None)
logging.getLogger("sky.server.common").info("a SkyPilot log line")
from sky import sky_logging
sky_logging.init_logger("sky.some.module").warning("another one")
"""


def test_skypilot_log_lines_go_to_stderr_not_stdout(tmp_path: Path) -> None:
    env = {"SKYPILOT_DISABLE_USAGE_COLLECTION": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == ""
    assert "a SkyPilot log line" in done.stderr and "another one" in done.stderr
