"""Stopping a tuning run on purpose: SIGINT, SIGTERM and SIGHUP handled like Ctrl-C, and a stop asked from
another thread (its MCP session ending). Whatever stops a run, the runner tears down what it started.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # each is handled like Ctrl-C
RECANCEL_S = 0.5  # a stop whose cancellation something swallowed is delivered again this often


class RunStopped(Exception):
    """A run stopped on purpose (a signal, its MCP session ending) after tearing down what it started."""

    def __init__(self, run_id: str, reason: str, signum: int | None = None) -> None:
        self.run_id = run_id
        self.reason = reason
        self.signum = signum
        super().__init__(f"run {run_id} stopped ({reason}); torn down; continue it with: worldtune resume {run_id}")


class RunControl:
    """How a running graph is asked to stop: the reason is kept, and the driving task cancelled until it notices.

    The reason is what counts: a cancellation that some library swallows on the way (seen under load, where
    a Ctrl-C let the run finish and exit 0) is delivered again, and the driver checks the reason after every
    step and at the end, so a stopped run never reports success.
    """

    def __init__(self, run_id: str, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> None:
        self.run_id = run_id
        self.loop = loop
        self.task = task
        self.reason: str | None = None
        self.signum: int | None = None
        self.noticed = False

    def stop(self, reason: str, signum: int | None = None) -> None:
        """Ask the run to stop (call on its loop's thread); a second call keeps the first reason."""
        if self.reason is None:
            self.reason, self.signum = reason, signum
            self._cancel()

    def _cancel(self) -> None:
        if not self.noticed and not self.task.done():
            self.task.cancel()
            self.loop.call_later(RECANCEL_S, self._cancel)

    def notice(self) -> RunStopped | None:
        """Called where the driver catches: stops the re-cancelling and clears the task's pending cancels."""
        if self.reason is None:
            return None
        self.noticed = True
        while self.task.cancelling():
            self.task.uncancel()
        return RunStopped(self.run_id, self.reason, self.signum)


CONTROLS: dict[str, RunControl] = {}  # the runs this process drives, by id (agent/runner.py adds and removes them)


def catch_signals(loop: asyncio.AbstractEventLoop, control: RunControl) -> list[int]:
    """SIGINT, SIGTERM and SIGHUP stop the run like Ctrl-C (only the main thread can take signals)."""
    if threading.current_thread() is not threading.main_thread():
        return []
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, control.stop, signal.Signals(sig).name, int(sig))
    return list(STOP_SIGNALS)


def stop_tuning(run_id: str, reason: str) -> bool:
    """Ask a run driven in this process to stop (it tears down what it started); False when none runs here."""
    control = CONTROLS.get(run_id)
    if control is None:
        return False
    control.loop.call_soon_threadsafe(control.stop, reason, None)
    return True
