"""The results database's file: where it lives, its tables, the columns added since, and a connection to it.

`Database` is the base of every record family of `Store` (tools/store/database.py): opening one creates the tables a
new file lacks and adds to an older file the columns it predates (ADDED_COLUMNS), once per file per process, then
every read and write goes through `_connect`, one transaction that commits on success, on a connection this thread
keeps for the file (a fresh connection per read cost ~0.35 ms: the open, and on close the WAL checkpoint of the
last connection; the agent reads its records thousands of times a run, issue 35).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from worldtune.tools.store.db_path import EXPECTED, open_here, resolve_db_path
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
        if _identity(self.path) in _READY:  # this very file was brought up to date by this process already
            return
        with self._connect() as db:
            open_here(self.path)  # from now on its header is not read beside our connections (db_path says why)
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
        _READY.add(_identity(self.path))

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        db = _connection(self.path)
        with db:  # commits on success, rolls back on error
            yield db


KEPT_PER_THREAD = 8  # connections one thread keeps open (most recently used files); the oldest is closed
_KEPT = threading.local()  # .conns: OrderedDict[str, (connection, file identity)], this thread's own
_READY: set[tuple[str, int, int]] = set()  # files (path, device, inode) whose tables this process has ensured


def _identity(path: Path) -> tuple[str, int, int]:
    """The file at `path` as (path, device, inode); a missing file is (path, -1, -1). A file deleted and created
    again is another file: its connection is not reused and its tables are ensured again."""
    try:
        info = os.stat(path)
    except OSError:
        return (str(path), -1, -1)
    return (str(path), info.st_dev, info.st_ino)


def _connection(path: Path) -> sqlite3.Connection:
    """This thread's connection to the file at `path`: the one it kept while the file is the same file, else a new
    one (kept, the least recently used closed past KEPT_PER_THREAD). A connection never crosses threads: sqlite3
    refuses that, and each thread's transactions stay its own."""
    conns: OrderedDict[str, tuple[sqlite3.Connection, tuple[str, int, int]]] = _KEPT.__dict__.setdefault(
        "conns", OrderedDict()
    )
    key, now = str(path), _identity(path)
    kept = conns.pop(key, None)
    if kept is not None:
        if kept[1] == now and now[1] != -1:
            conns[key] = kept
            return kept[0]
        kept[0].close()
    db = sqlite3.connect(path, timeout=30)
    db.row_factory = sqlite3.Row
    conns[key] = (db, _identity(path))
    while len(conns) > KEPT_PER_THREAD:
        conns.popitem(last=False)[1][0].close()
    return db


def decode_row(row: sqlite3.Row, json_columns: tuple[str, ...]) -> dict[str, Any]:
    """A row as a dict, its JSON columns parsed."""
    out = dict(row)
    for column in json_columns:
        if out.get(column):
            out[column] = json.loads(out[column])
    return out
