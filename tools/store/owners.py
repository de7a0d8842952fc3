"""Who owns a run or a deployment: a process (host, pid, start time) that heartbeats while it lives.

A pid alone is not an identity: the kernel reuses pids, so an owner is the pid together with the
process's start time (field 22 of /proc/PID/stat, in clock ticks since boot). On this host an owner
is alive while that exact process exists; from another host only its heartbeat can tell. The
heartbeat is one daemon thread per process: it dies with the process however the process ends
(SIGKILL included), which is what lets `worldtune gc` tell a dead owner from a busy one.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
import threading
import time
from pathlib import Path

HEARTBEAT_S = 3.0  # how often a live owner writes its heartbeat
STALE_S = float(os.environ.get("WORLDTUNE_HEARTBEAT_STALE_S", "60"))  # no beat for this long: the owner is dead


def host() -> str:
    return socket.gethostname()


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot; None when no such process (or a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z":  # a zombie has finished; only its exit status is left to collect
        return None
    return int(fields[19])  # field 22 overall; fields[0] is field 3 (state)


def process_alive(pid: int, started: int | None) -> bool:
    """Whether the process `pid` that started at `started` still runs (a recycled pid does not count)."""
    now = start_time(pid)
    return now is not None and (started is None or now == started)


def this_process() -> tuple[str, int, int]:
    """(host, pid, start time) of the calling process."""
    pid = os.getpid()
    return host(), pid, start_time(pid) or 0


def process_owner_id() -> str:
    """The owner id of this process itself (for what it starts outside any run, e.g. a standalone deploy)."""
    name, pid, started = this_process()
    return f"proc-{name}-{pid}-{started}"


class Heartbeat:
    """The process's heartbeat thread: every HEARTBEAT_S it stamps each owner this process holds."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: set[tuple[str, str]] = set()  # (database path, owner id)
        self._thread: threading.Thread | None = None
        self._pid = 0

    def hold(self, db_path: Path, owner_id: str) -> None:
        with self._lock:
            self._held.add((str(db_path), owner_id))
            if self._thread is None or not self._thread.is_alive() or self._pid != os.getpid():
                self._pid = os.getpid()  # a forked child needs a thread of its own
                self._thread = threading.Thread(target=self._beat, name="worldtune-heartbeat", daemon=True)
                self._thread.start()

    def drop(self, db_path: Path, owner_id: str) -> None:
        with self._lock:
            self._held.discard((str(db_path), owner_id))

    def held(self) -> set[tuple[str, str]]:
        with self._lock:
            return set(self._held)

    def _beat(self) -> None:
        while True:
            time.sleep(HEARTBEAT_S)
            for db_path, owner_id in self.held():
                if not Path(db_path).is_file():  # the database was removed: nothing left to stamp, ever
                    self.drop(Path(db_path), owner_id)
                    continue
                with contextlib.suppress(sqlite3.Error):  # a busy database only delays one beat
                    beat(db_path, owner_id)


def beat(db_path: str, owner_id: str) -> None:
    """Stamp one owner's heartbeat now, in the database as it is (opened read-write: a heartbeat never creates
    a database where one was removed, which an open that may create would do, empty, in the folder)."""
    from urllib.parse import quote

    db = sqlite3.connect(f"file:{quote(os.path.abspath(db_path))}?mode=rw", uri=True, timeout=5)
    try:
        with db:
            db.execute(
                "UPDATE owners SET heartbeat_at = ? WHERE id = ? AND released_at IS NULL", (time.time(), owner_id)
            )
    finally:
        db.close()


HEARTBEAT = Heartbeat()
