"""Fixtures of the Slurm tests (tests/integration/slurm_support.py says how several workers would share the cluster)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm_support import cluster_in_use, slurm_jobs_of


@pytest.fixture(scope="session")
def slurm_env() -> Iterator[dict[str, str]]:
    """The local Slurm cluster up, and the environment of a SkyPilot client with the tests' private home."""
    if os.geteuid() != 0:
        pytest.skip("the local Slurm cluster needs root (Debian packages, munge, slurmd)")
    with cluster_in_use() as env:
        yield env


@pytest.fixture
def slurm_db(slurm_env: dict[str, str], tmp_path: Path) -> Iterator[Path]:
    """This test's database; afterwards, any Slurm job of a cluster it recorded is cancelled (the test has failed
    already if one is left): every 8-GPU test fills the node, and a leftover would keep the next launch pending.
    Another worker's jobs are never touched."""
    db = tmp_path / "wt.db"
    yield db
    for job in slurm_jobs_of(db):
        subprocess.run(["scancel", job], capture_output=True)
