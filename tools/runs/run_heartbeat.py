"""A run belongs to its client: the client's heartbeat per run, and what the server does when it stops.

An MCP client that starts a run (start_tuning, or the agent driving a run over `--mcp-url`) is bound to it in
the `run_clients` table: the MCP session it came from, the server process that serves it, a grace (default
120 s: `$WORLDTUNE_RUN_GRACE_S`, `worldtune mcp --run-grace-s`, or per run) and the time of its last heartbeat
(heartbeat_run, or any tool call carrying the run's id). When the heartbeat is older than the grace, or the
session ends, the server's sweep (`RunSweeper`, a thread of the MCP server process, every
`$WORLDTUNE_RUN_SWEEP_S` s, default 5, at once on a session end) abandons the run: from that moment every call
that would start something for it is refused (tools/mcp/heartbeat.py), the run's driver in this process is
stopped at its next safe point (the runner cancels between steps and tears down), every deployment of the run
still alive is torn down, and the run is marked `abandoned` with the reason. Samples and benchmarks are kept:
nothing here deletes a row. A detached run (`detach: true`) outlives its session; with `hold_hours` the server
still abandons it once that long has passed without a heartbeat.

Only the server a run is bound to sweeps it (another server over the same database never tears down what a
live server drives); a server that died leaves its runs to `worldtune gc` (their owner's heartbeat stops).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from worldtune.tools.store import owners
from worldtune.tools.store.database import Store
from worldtune.tools.words.errors import InvalidInput

GRACE_ENV = "WORLDTUNE_RUN_GRACE_S"
SWEEP_ENV = "WORLDTUNE_RUN_SWEEP_S"
DEFAULT_GRACE_S = 120.0
DEFAULT_SWEEP_S = 5.0
SETTLE_S = 30.0  # a deploy in flight when the run was abandoned may still finish: list again until quiet

TABLE = """
CREATE TABLE IF NOT EXISTS run_clients (
    run_id TEXT PRIMARY KEY, session TEXT NOT NULL, server TEXT NOT NULL, grace_s REAL,
    detach INTEGER NOT NULL DEFAULT 0, hold_hours REAL, bound_at REAL NOT NULL, heartbeat_at REAL NOT NULL,
    session_ended_at REAL, abandoned_at REAL, reason TEXT, torn_down_at REAL, teardown TEXT
);
"""
WAKE = threading.Event()  # set when a session ends, so the sweep acts at once instead of at its next tick
log = logging.getLogger("worldtune.runs")


def _seconds(name: str, raw: str | float | None, default: float, most: float) -> float:
    """A positive finite number of seconds, or a refusal naming the setting."""
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not (0 < value <= most):
        raise InvalidInput(name, raw, f"seconds, a number in (0, {most:g}]")
    return value


def default_grace_s() -> float:
    return _seconds(GRACE_ENV, os.environ.get(GRACE_ENV), DEFAULT_GRACE_S, 86400)


def sweep_interval_s() -> float:
    return _seconds(SWEEP_ENV, os.environ.get(SWEEP_ENV), DEFAULT_SWEEP_S, 3600)


def check_grace(grace_s: float | None) -> float:
    """A run's grace as asked (None: the server's default), refused when it is not a sane number of seconds."""
    return default_grace_s() if grace_s is None else _seconds("grace_s", grace_s, DEFAULT_GRACE_S, 86400)


@contextmanager
def _db(store: Store) -> Iterator[sqlite3.Connection]:
    db = sqlite3.connect(store.path, timeout=30)
    db.row_factory = sqlite3.Row
    try:
        with db:
            db.executescript(TABLE)
            yield db
    finally:
        db.close()


def bind(
    store: Store,
    run_id: str,
    session: str,
    grace_s: float | None = None,
    detach: bool = False,
    hold_hours: float | None = None,
) -> dict[str, Any]:
    """Bind a run to the client session `session` of this server, heartbeating from now; binding again (the same
    run from another session, or new terms) moves it there. Refused once the run was abandoned."""
    if hold_hours is not None and not detach:
        raise InvalidInput(
            "hold_hours", hold_hours, "only with detach=true (how long a detached run may go on without a heartbeat)"
        )
    grace = hold_hours * 3600.0 if detach and hold_hours is not None else (None if detach else check_grace(grace_s))
    now = time.time()
    found = get(store, run_id)
    if found is not None and found["abandoned_at"] is not None:
        raise InvalidInput("run_id", run_id, "a run that is still going", f"it was abandoned: {found['reason']}")
    with _db(store) as db:
        db.execute(
            "INSERT INTO run_clients (run_id, session, server, grace_s, detach, hold_hours, bound_at, heartbeat_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(run_id) DO UPDATE SET session = excluded.session, "
            "server = excluded.server, grace_s = excluded.grace_s, detach = excluded.detach, "
            "hold_hours = excluded.hold_hours, heartbeat_at = excluded.heartbeat_at, session_ended_at = NULL",
            (run_id, session, owners.process_owner_id(), grace, int(detach), hold_hours, now, now),
        )
    return get(store, run_id) or {}


def get(store: Store, run_id: str) -> dict[str, Any] | None:
    with _db(store) as db:
        row = db.execute("SELECT * FROM run_clients WHERE run_id = ?", (run_id,)).fetchone()
    return dict(row) if row else None


def abandoned_reason(store: Store, run_id: str) -> str | None:
    """Why the run was abandoned, or None while it is not."""
    row = get(store, run_id)
    return str(row["reason"]) if row is not None and row["abandoned_at"] is not None else None


CLIENT_BEAT_S = 2.0  # how often a client beats at most (agent/tools_client.py HEARTBEAT_S; 4 beats per shorter grace)


def missed_after_s(grace_s: float) -> float:
    """Silence after which a client has missed its heartbeat: 2.5 beats (a loaded machine may be late by one),
    never more than half the grace. At the default grace (120 s, a beat every 2 s): 5 s. A client that is only
    slow costs the run that wait; one that died buys nothing after it."""
    beat = min(CLIENT_BEAT_S, max(0.5, grace_s / 4))
    return min(grace_s / 2, 2.5 * beat)


HOLD = {"starts": False}  # set by an HTTP server (worldtune/cli_mcp.py): hold a run's starts once its client is silent


def hold_starts(on: bool = True) -> None:
    """Whether this process holds the starts of a run whose client missed its heartbeat. An HTTP server does: its
    clients are known to be there only by their beats. A stdio server does not: the pipe closing is its client
    leaving, and abandons the run at once; a stdio client that only waits is still there."""
    HOLD["starts"] = on


def missed_heartbeat(store: Store, run_id: str, now: float | None = None) -> str | None:
    """Why the run's client looks gone while its grace is not yet out (it missed its beats, or its session ended),
    or None: a run bound to no client, a detached one, an abandoned one (refused elsewhere) or a live client."""
    row = get(store, run_id)
    if row is None or row["detach"] or row["abandoned_at"] is not None or row["grace_s"] is None:
        return None
    if row["session_ended_at"] is not None:
        return "its MCP session ended"
    silent = (time.time() if now is None else now) - float(row["heartbeat_at"])
    if silent > missed_after_s(float(row["grace_s"])):
        return f"no heartbeat from its client for {silent:.0f} s (grace {float(row['grace_s']):g} s)"
    return None


def session_ended(store: Store, session: str) -> list[str]:
    """The client session ended: its runs that are not detached are due now (the sweep is woken)."""
    with _db(store) as db:
        rows = db.execute(
            "SELECT run_id FROM run_clients WHERE session = ? AND detach = 0 AND abandoned_at IS NULL", (session,)
        ).fetchall()
        db.execute(
            "UPDATE run_clients SET session_ended_at = ? WHERE session = ? AND session_ended_at IS NULL",
            (time.time(), session),
        )
    WAKE.set()
    return [str(r["run_id"]) for r in rows]


def due(store: Store, now: float | None = None) -> list[tuple[str, str]]:
    """(run id, reason) of this server's runs whose client is gone: session ended, or heartbeat past its grace.
    Runs that ended by themselves are let go (their row is closed with the run's own status)."""
    now = time.time() if now is None else now
    with _db(store) as db:
        rows = db.execute(
            "SELECT c.*, r.status AS run_status FROM run_clients c LEFT JOIN runs r ON r.id = c.run_id "
            "WHERE c.abandoned_at IS NULL AND c.server = ?",
            (owners.process_owner_id(),),
        ).fetchall()
    found = []
    for row in rows:
        if row["run_status"] in ("completed", "failed", "interrupted", "abandoned", "waiting_for_approval"):
            continue  # ended on its own, or waits for approval holding nothing (resume binds it again)
        if row["session_ended_at"] is not None and not row["detach"]:
            found.append((str(row["run_id"]), "its MCP session ended"))
        elif row["grace_s"] is not None and now - float(row["heartbeat_at"]) > float(row["grace_s"]):
            silent = now - float(row["heartbeat_at"])
            what = f"hold_hours={row['hold_hours']:g}" if row["detach"] else f"grace {float(row['grace_s']):g} s"
            found.append((str(row["run_id"]), f"no heartbeat from its client for {silent:.0f} s ({what})"))
    return found


def _mark_abandoned(store: Store, run_id: str, reason: str) -> None:
    with _db(store) as db:
        db.execute(
            "UPDATE run_clients SET abandoned_at = ?, reason = ? WHERE run_id = ? AND abandoned_at IS NULL",
            (time.time(), reason, run_id),
        )


def tear_down_run(store: Store, run_id: str, settle_s: float = SETTLE_S) -> list[dict[str, Any]]:
    """Tear down every live deployment of the run, listing again until two listings in a row find none (a deploy
    in flight may still land) or `settle_s` passes; one that fails is reported and left to the lease sweep / gc."""
    from worldtune.tools.deployments import deploy

    done: list[dict[str, Any]] = []
    deadline, quiet = time.monotonic() + settle_s, 0
    while quiet < 2 and time.monotonic() < deadline:
        found = store.list_deployments(run_id=run_id, alive_only=True)
        quiet = 0 if found else quiet + 1
        for deployment in found:
            try:
                gone = deploy.teardown(deployment.id, store=store)
                done.append({"deployment_id": gone.id, "state": gone.state})
            except Exception as exc:  # report and go on: one stuck deployment must not keep the others up
                done.append({"deployment_id": deployment.id, "state": f"failed: {type(exc).__name__}: {exc}"})
        if quiet < 2:
            time.sleep(0.5)
    return done


Stopper = Callable[[str, str], bool]  # (run id, reason) -> whether a driver of this process was stopped


def _record_abandoned(store: Store, run_id: str, reason: str) -> None:
    run = store.get_run(run_id)
    if run is not None:
        summary = run["summary"] if isinstance(run.get("summary"), dict) else {}
        store.finish_run(
            run_id,
            "abandoned",
            {**summary, "abandoned": reason, "error": f"abandoned: {reason}", "resume": f"worldtune resume {run_id}"},
        )


def abandon(store: Store, run_id: str, reason: str, stop_driver: Stopper | None = None) -> dict[str, Any]:
    """Abandon a run: refuse its starts, stop its driver here (it tears down at its next safe point), tear down
    what is left, and mark it `abandoned` with the reason (its summary and samples kept)."""
    _mark_abandoned(store, run_id, reason)
    _record_abandoned(store, run_id, reason)  # first: a server killed while its driver stops still says so
    stopped = bool(stop_driver and stop_driver(run_id, f"abandoned: {reason}"))
    torn = tear_down_run(store, run_id)
    _record_abandoned(store, run_id, reason)  # again: the stopped driver may have marked it interrupted
    with _db(store) as db:
        db.execute(
            "UPDATE run_clients SET torn_down_at = ?, teardown = ? WHERE run_id = ?",
            (time.time(), repr(torn)[:2000], run_id),
        )
    log.warning("run %s abandoned (%s): driver stopped=%s, torn down %s", run_id, reason, stopped, torn)
    return {"run_id": run_id, "reason": reason, "driver_stopped": stopped, "torn_down": torn}


def release(store: Store, run_id: str) -> bool:
    """A person resumes the run (`worldtune resume`): it no longer belongs to the client that left it, so its
    starts are not refused as an abandoned run's. Its record keeps why it was abandoned; True if it was bound."""
    with _db(store) as db:
        return db.execute("DELETE FROM run_clients WHERE run_id = ?", (run_id,)).rowcount > 0


def sweep(store: Store, stop_driver: Stopper | None = None, now: float | None = None) -> list[dict[str, Any]]:
    """Abandon every run of this server whose client is gone."""
    return [abandon(store, run_id, reason, stop_driver) for run_id, reason in due(store, now)]


class RunSweeper:
    """The MCP server's sweep of its runs' heartbeats: `sweep` every `interval_s` (or at once when woken)."""

    def __init__(self, db_path: str | None, stop_driver: Stopper | None = None, interval_s: float | None = None):
        self.db_path = db_path
        self.stop_driver = stop_driver
        self.interval_s = sweep_interval_s() if interval_s is None else interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="worldtune-run-sweep", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            WAKE.wait(self.interval_s)
            WAKE.clear()
            if self._stop.is_set():
                return
            try:
                sweep(Store(self.db_path), self.stop_driver)
            except Exception as exc:  # a locked database: try again next time, never kill the server
                log.warning("run sweep failed: %s: %s", type(exc).__name__, exc)

    def __enter__(self) -> RunSweeper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        WAKE.set()


def beat_from(store: Store, run_id: str, session: str) -> bool:
    """Stamp the run's heartbeat if `session` is the client it is bound to (a run's own tools, driven by the
    server, never keep it alive); False otherwise."""
    with _db(store) as db:
        done = db.execute(
            "UPDATE run_clients SET heartbeat_at = ? WHERE run_id = ? AND session = ? AND abandoned_at IS NULL",
            (time.time(), run_id, session),
        )
    return done.rowcount > 0
