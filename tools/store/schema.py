"""The results database's file: where it lives, its tables, the columns added since, and a connection to it.

`Database` is the base of every record family of `Store` (tools/store/database.py): opening one creates the tables a
new file lacks and adds to an older file the columns it predates (ADDED_COLUMNS), then every read and write
goes through `_connect`, one short-lived connection that commits on success.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from worldtune.tools.store.db_path import EXPECTED, resolve_db_path
from worldtune.tools.words.errors import InvalidInput

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY, kind TEXT NOT NULL, status TEXT NOT NULL, goal TEXT,
    created_at REAL NOT NULL, finished_at REAL, summary TEXT
);
CREATE TABLE IF NOT EXISTS deployments (
    id TEXT PRIMARY KEY, run_id TEXT, state TEXT NOT NULL, infra TEXT NOT NULL,
    created_at REAL NOT NULL, updated_at REAL NOT NULL, body TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS benchmarks (
    id TEXT PRIMARY KEY, run_id TEXT, deployment_id TEXT, status TEXT NOT NULL,
    progress REAL NOT NULL DEFAULT 0, message TEXT NOT NULL DEFAULT '', config TEXT NOT NULL,
    started_at REAL NOT NULL, finished_at REAL, result TEXT, error TEXT
);
CREATE TABLE IF NOT EXISTS samples (
    id INTEGER PRIMARY KEY AUTOINCREMENT, benchmark_id TEXT NOT NULL, seq INTEGER NOT NULL,
    phase TEXT NOT NULL, steps INTEGER NOT NULL, concurrency INTEGER NOT NULL, endpoint TEXT NOT NULL,
    sent_at REAL NOT NULL, latency_s REAL, server_time_s REAL, ok INTEGER NOT NULL,
    error_kind TEXT, status_code INTEGER, body TEXT NOT NULL,
    UNIQUE (benchmark_id, seq)
);
CREATE INDEX IF NOT EXISTS samples_by_benchmark ON samples (benchmark_id, seq);
CREATE TABLE IF NOT EXISTS benchmark_locks (
    target TEXT PRIMARY KEY, benchmark_id TEXT NOT NULL, acquired_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS ledger (
    cluster TEXT PRIMARY KEY, backend TEXT NOT NULL, deployment_id TEXT, run_id TEXT,
    launched_at REAL NOT NULL, gone_at REAL, state TEXT NOT NULL, detail TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS owners (
    id TEXT PRIMARY KEY, kind TEXT NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL, pid_start INTEGER NOT NULL,
    created_at REAL NOT NULL, heartbeat_at REAL NOT NULL, released_at REAL, detach INTEGER NOT NULL DEFAULT 0
);
"""
# Columns newer than a table's first version: (table, column, declaration), added to older databases on open.
ADDED_COLUMNS = (("deployments", "owner_id", "TEXT"), ("ledger", "owner_id", "TEXT"))


class Database:
    """One results database file, its schema brought up to date on open."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = resolve_db_path(path)  # refused in one line, before any folder or file is created
        try:
            self._open()
        except (OSError, sqlite3.DatabaseError) as exc:  # what the checks could not foresee (a full disk, a lock)
            raise InvalidInput("db", str(self.path), EXPECTED, f"it could not be opened: {exc}") from None

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(SCHEMA)
            for table, column, declaration in ADDED_COLUMNS:
                present = {r["name"] for r in db.execute(f"PRAGMA table_info({table})")}
                if column not in present:
                    try:
                        db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
                    except sqlite3.OperationalError as exc:  # another process added it a moment ago
                        if "duplicate column" not in str(exc):
                            raise

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=30)
        db.row_factory = sqlite3.Row
        try:
            with db:  # commits on success, rolls back on error
                yield db
        finally:
            db.close()


def decode_row(row: sqlite3.Row, json_columns: tuple[str, ...]) -> dict[str, Any]:
    """A row as a dict, its JSON columns parsed."""
    out = dict(row)
    for column in json_columns:
        if out.get(column):
            out[column] = json.loads(out[column])
    return out
