"""Shared test settings: SkyPilot never phones home, and nothing touches the user's real homes."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

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
    "test_real_engine_server.py",  # the real vLLM-Omni on CPU ranks: several server starts of 20-120 s each
    "test_faults.py",
    "test_tune_rehearsal.py",
    "test_remote_traffic.py",
    "test_claim_lanes.py",
    "test_mcp_stdio.py",
    "test_bench_twin.py",
    "test_langgraph_dev.py",
    "test_real_engine_parser.py",  # renders every plan, then the real parser: ~80 s
    "test_real_engine_twin_diff.py",
)


def pytest_collection_modifyitems(config: object, items: list[Any]) -> None:
    def rank(item: Any) -> int:
        name = Path(str(item.fspath)).name
        if name in LONGEST_FIRST:
            return LONGEST_FIRST.index(name)
        return len(LONGEST_FIRST) + (1 if "/unit/" in str(item.fspath) else 0)

    items.sort(key=rank)  # stable: each file's own order is kept


def _cpu_s() -> float:
    """CPU seconds of this process and of its waited-for children (the twins, CLIs and servers a test started and
    reaped, with what they reaped in turn); not of detached daemons such as SkyPilot's API server."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


CPU_BEGAN = pytest.StashKey[float]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    item.stash[CPU_BEGAN] = _cpu_s()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Each test's CPU seconds (setup, call, teardown) as a JUnit property on its teardown report, the one the JUnit
    XML takes properties from: on 2 cores the suite is CPU-bound, so what a test costs the run is its CPU, not its
    wall time (scripts/slowest.py prints the largest files; issue 35)."""
    if call.when == "teardown" and CPU_BEGAN in item.stash:
        item.user_properties.append(("cpu_s", round(_cpu_s() - item.stash[CPU_BEGAN], 2)))
    yield
