"""Shared test settings: SkyPilot never phones home, and nothing touches the user's real homes."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("SKYPILOT_DISABLE_USAGE_COLLECTION", "1")
# A private cache for the whole test process: dry runs import SkyPilot under a home inside the cache
# (sky/home.py) and offers are read from that home's catalog files, so a shared ~/.cache that another
# process rewrote would change prices mid-suite (test_mcp_server's quotes failed after one did).
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="worldtune-test-cache-")
atexit.register(shutil.rmtree, os.environ["XDG_CACHE_HOME"], True)  # each worker's, gone with it


# The longest files first (each file's order kept), so that with both cores (pytest-xdist, --dist loadfile in
# scripts/test.sh) the long ones start at once and the short ones fill the gaps at the end. Seconds are from a run
# on 2 cores (issue 35's note); a file not listed runs after these, the unit tests last.
# (pytest-xdist gives a worker a second file at once when it has at most 2 tests pending: the Slurm file has 4.)
LONGEST_FIRST = (
    "test_slurm_skypilot.py",  # ~13 min of SkyPilot launches on the local Slurm cluster, one worker
    "test_tune.py",
    "test_faults.py",
    "test_tune_rehearsal.py",
    "test_remote_traffic.py",
    "test_claim_lanes.py",
    "test_mcp_stdio.py",
    "test_bench_twin.py",
    "test_langgraph_dev.py",
)


def pytest_collection_modifyitems(config: object, items: list[Any]) -> None:
    def rank(item: Any) -> int:
        name = Path(str(item.fspath)).name
        if name in LONGEST_FIRST:
            return LONGEST_FIRST.index(name)
        return len(LONGEST_FIRST) + (1 if "/unit/" in str(item.fspath) else 0)

    items.sort(key=rank)  # stable: each file's own order is kept
