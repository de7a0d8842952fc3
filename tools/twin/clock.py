"""The twin engine's model clock: when each answer was done, in model seconds (the X-Twin-Done-At header).

It advances by the simulated stage times only, so a loaded machine's late wake-ups do not stretch it. A request
queued behind another starts when that one releases the engine; one arriving at an idle engine starts after the
last answer plus the wall time since, unscaled: that gap is the client's turnaround and the twin's own MP4
encoding, which a real server's clip does not take K times longer for (an open loop's arrival gaps are timed by
its client, not by this clock). A simulation's clock, not a measurement: only the twin has one.
"""

from __future__ import annotations

import time


class EngineClock:
    """One engine's model clock (see the module's docstring); `scale` is the twin's time scale K."""

    def __init__(self, scale: float) -> None:
        self.scale = scale
        now = time.monotonic()
        self.released = (0.0, now)  # (model clock, wall time) at the last release of the engine
        self.answered = (0.0, now)  # (model clock, wall time) at the last answer done
        self.began = (0.0, now)  # (model clock, wall time) when the engine was last taken
        self.holding = 0  # requests that arrived and have not yet released the engine
        self.answering = 0  # requests past the engine, in their overlapping tail

    def arrive(self) -> bool:
        """A request arrives; whether it queues behind another (it then starts when that one releases)."""
        self.holding += 1
        return self.holding > 1

    def arrival(self) -> float:
        """The model clock when a request arrives to queue: the holder's start plus the scaled wall time since.
        Its queue wait is then its start less this, both on the model clock: a loaded machine's late wake-ups
        while it waits (K times the scheduler's jitter, measured in wall time) are not counted."""
        return self.began[0] + (time.monotonic() - self.began[1]) * self.scale

    def start(self, queued: bool) -> float:
        """The model clock when a request takes the engine."""
        now = time.monotonic()
        if queued:
            at = self.released[0]
        elif self.answering:  # during the tail of the one before: scaled, as the tail itself is
            at = self.released[0] + (now - self.released[1]) * self.scale
        else:
            at = max(self.released[0], self.answered[0] + (now - self.answered[1]))
        self.began = (at, now)
        return at

    def release(self, at: float) -> None:
        """The request holding the engine lets it go at model time `at` (call before the next one can take it)."""
        self.released = (at, time.monotonic())

    def leave(self) -> None:
        """The request no longer waits for or holds the engine (released, or failed before it got it)."""
        self.holding -= 1

    def tail(self, done: bool, at: float = 0.0) -> None:
        """A request enters its tail (done=False) or its answer is done at model time `at` (done=True)."""
        if not done:
            self.answering += 1
            return
        self.answering -= 1
        self.answered = (max(at, self.answered[0]), time.monotonic())
