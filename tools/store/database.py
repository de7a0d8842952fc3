"""The results database: runs, deployments, benchmarks, every sample, and the cluster ledger (SQLite, WAL).

Each write commits at once, so a crash or a kill loses nothing already measured. Every process
opens its own short-lived connections; WAL lets readers (the CLI, the MCP server) look while a
benchmark writes. Every run, deployment and ledger row has an owner (a run, or the process that made
it) whose heartbeat is in `owners` (tools/store/owners.py), so `gc` can tell what a dead owner left behind.
Columns added since the first schema are added to older databases when they are opened.

`Store` is one class made of its record families: the file and its schema (tools/store/schema.py), runs
and owners (tools/store/runs.py), deployments and the ledger (tools/store/deployments.py), benchmarks,
samples and locks (tools/store/benchmarks.py).
"""

from __future__ import annotations

from worldtune.tools.store.benchmarks import BenchmarkRecords
from worldtune.tools.store.db_path import default_db_path
from worldtune.tools.store.deployments import DeploymentRecords
from worldtune.tools.store.schema import ADDED_COLUMNS, SCHEMA

__all__ = ["ADDED_COLUMNS", "SCHEMA", "Store", "default_db_path"]


class Store(DeploymentRecords, BenchmarkRecords):
    """A handle on one results database file."""
