"""Traffic: how requests arrive at a fleet, and the bound an answer must meet including its wait in the queue.

Four shapes: a Poisson rate (`40 requests/hour`), a daily window (`300 clips/day between 8:00 and 20:00`:
Poisson inside the window, nothing outside), bursts (`bursts of 50 every 2 hours`: that many requests at
once, every period) and a trace (a CSV of arrival times in seconds from the start of the day, one a line,
an optional header). The end-to-end bound counts the queue wait, any cold start and the service time.

A trace is a file the caller names: its path passes checks like tools/plans/profile_paths.py's (who asks,
length, /proc /sys /dev, regular file, suffix, size) and no refusal ever quotes the file's contents.
"""

from __future__ import annotations

import csv
import math
import os
import random
import stat
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from worldtune.tools.words.errors import InvalidInput

Shape = Literal["poisson", "daily_window", "bursts", "trace"]
SHAPES: tuple[str, ...] = ("poisson", "daily_window", "bursts", "trace")
FleetObjective = Literal["min_cost_per_day", "min_cost_per_clip"]
E2E_PERCENTILES = (50, 90, 95, 99)
DAY_S = 86400.0
TRACE_DIR_ENV = "WORLDTUNE_TRACE_DIR"
MAX_TRACE_BYTES = 8 * 1024 * 1024
MAX_TRACE_ARRIVALS = 200_000
MAX_PATH_CHARS = 1024
FORBIDDEN_ROOTS = (Path("/proc"), Path("/sys"), Path("/dev"))
MAX_RATE_PER_HOUR = 100_000.0


class Traffic(BaseModel):
    """Arrivals of one day and the end-to-end latency bound (queue wait + cold start + service) they must meet."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    shape: Shape = "poisson"
    rate_per_hour: float | None = Field(default=None, gt=0, le=MAX_RATE_PER_HOUR, allow_inf_nan=False)
    clips_per_day: float | None = Field(default=None, gt=0, le=MAX_RATE_PER_HOUR * 24, allow_inf_nan=False)
    window_start_h: float = Field(default=0.0, ge=0, le=24)
    window_end_h: float = Field(default=24.0, ge=0, le=24)
    burst_size: int | None = Field(default=None, ge=1, le=10_000)
    burst_every_s: float | None = Field(default=None, ge=60, le=DAY_S, allow_inf_nan=False)
    trace_path: str | None = Field(default=None, description="the CSV the arrivals were read from")
    trace_s: tuple[float, ...] = Field(default=(), description="arrival times (s from the day's start) of a trace")
    e2e_bound_s: float | None = Field(default=None, gt=0, allow_inf_nan=False, description="end-to-end bound")
    e2e_percentile: int = 95
    objective: FleetObjective = "min_cost_per_day"

    @model_validator(mode="after")
    def _shape_fields(self) -> Traffic:
        if self.e2e_percentile not in E2E_PERCENTILES:
            raise InvalidInput("e2e_percentile", self.e2e_percentile, f"one of {E2E_PERCENTILES}")
        need = {"poisson": "rate_per_hour", "daily_window": "clips_per_day", "bursts": "burst_size"}
        if self.shape in need and getattr(self, need[self.shape]) is None:
            raise InvalidInput(need[self.shape], None, f"a positive number for {self.shape} traffic")
        if self.shape == "bursts" and self.burst_every_s is None:
            raise InvalidInput("burst_every_s", None, "the period of the bursts in seconds (60 to 86400)")
        if self.shape == "daily_window" and self.window_end_h <= self.window_start_h:
            raise InvalidInput(
                "window_end_h", self.window_end_h, f"an hour after window_start_h={self.window_start_h:g} (0-24)"
            )
        if self.shape == "trace" and not self.trace_s:
            raise InvalidInput("trace_s", "()", "at least one arrival time (load it with read_trace)")
        return self

    @property
    def clips_per_day_mean(self) -> float:
        """Expected arrivals in one day."""
        if self.shape == "poisson":
            return float(self.rate_per_hour or 0.0) * 24
        if self.shape == "daily_window":
            return float(self.clips_per_day or 0.0)
        if self.shape == "bursts":
            return float(self.burst_size or 0) * math.floor(DAY_S / float(self.burst_every_s or DAY_S))
        return float(len(self.trace_s))

    @property
    def peak_rate_per_hour(self) -> float:
        """The mean arrival rate where traffic is busiest (the window's rate; a burst's period average)."""
        if self.shape == "daily_window":
            return float(self.clips_per_day or 0.0) / (self.window_end_h - self.window_start_h)
        return self.clips_per_day_mean / 24

    def arrivals(self, seed: int = 0, horizon_s: float = DAY_S) -> list[float]:
        """Arrival times (s) over `horizon_s` from the start of the day; a random shape is drawn from `seed`."""
        rng = random.Random(seed)
        if self.shape == "trace":
            return [t for t in self.trace_s if t < horizon_s]
        if self.shape == "bursts":
            every = float(self.burst_every_s or DAY_S)
            return [k * every for k in range(math.ceil(horizon_s / every)) for _ in range(self.burst_size or 0)]
        if self.shape == "poisson":
            return _poisson(rng, float(self.rate_per_hour or 0.0) / 3600, 0.0, horizon_s)
        rate = self.peak_rate_per_hour / 3600
        out: list[float] = []
        for day in range(math.ceil(horizon_s / DAY_S)):
            start = day * DAY_S + self.window_start_h * 3600
            end = min(day * DAY_S + self.window_end_h * 3600, horizon_s)
            if start < end:
                out += _poisson(rng, rate, start, end)
        return out

    def describe(self) -> str:
        if self.shape == "poisson":
            text = f"{self.rate_per_hour:g} requests/hour (Poisson)"
        elif self.shape == "daily_window":
            text = f"{self.clips_per_day:g} clips/day between {self.window_start_h:g}:00 and {self.window_end_h:g}:00"
        elif self.shape == "bursts":
            text = f"bursts of {self.burst_size} every {float(self.burst_every_s or 0) / 3600:g} h"
        else:
            text = f"trace of {len(self.trace_s)} arrivals ({Path(self.trace_path or '').name})"
        if self.e2e_bound_s:
            text += f", p{self.e2e_percentile} <= {self.e2e_bound_s:g} s end to end"
        return text + f", {self.objective.replace('_', ' ')}"


def _poisson(rng: random.Random, rate_per_s: float, start: float, end: float) -> list[float]:
    out, t = [], start
    while rate_per_s > 0:
        t += rng.expovariate(rate_per_s)
        if t >= end:
            break
        out.append(t)
    return out


def trace_dir() -> Path:
    """Where MCP clients on this machine may name traces from: $WORLDTUNE_TRACE_DIR, else the config folder."""
    override = os.environ.get(TRACE_DIR_ENV)
    if override:
        return Path(override).expanduser()
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "worldtune" / "traces"


def allowed_trace_path(path: object, origin: str, field: str = "trace") -> Path:
    """The resolved CSV `path` names if `origin` ("cli", "mcp-local", "mcp-http") may read it; else InvalidInput."""
    expected = f"a readable .csv file of arrival times (over MCP: inside {trace_dir()})"
    if origin not in ("cli", "mcp-local", "mcp-http"):
        raise InvalidInput("origin", origin, "one of cli, mcp-local, mcp-http")
    if not isinstance(path, str) or not path.strip():
        raise InvalidInput(field, path, expected)
    if len(path) > MAX_PATH_CHARS or "\0" in path:
        raise InvalidInput(field, path[:60].replace("\0", "\\0"), f"a path of at most {MAX_PATH_CHARS} characters")
    if origin == "mcp-http":
        raise InvalidInput(field, path, "no trace file over remote MCP: give the traffic as a rate or a window")
    candidate = Path(path).expanduser()
    if origin == "mcp-local" and not candidate.is_absolute():
        candidate = trace_dir() / candidate
    try:
        found = candidate.resolve(strict=True)
    except (OSError, RuntimeError):
        raise InvalidInput(field, path, expected) from None
    if any(found == root or found.is_relative_to(root) for root in FORBIDDEN_ROOTS):
        raise InvalidInput(field, path, "a trace file, not a /proc, /sys or /dev entry")
    if origin == "mcp-local" and not found.is_relative_to(trace_dir().resolve()):
        raise InvalidInput(field, path, expected)
    try:
        st = found.stat()
    except OSError:
        raise InvalidInput(field, path, expected) from None
    if not stat.S_ISREG(st.st_mode):
        raise InvalidInput(field, path, "a regular file (not a folder, device or pipe)")
    if found.suffix.lower() != ".csv":
        raise InvalidInput(field, path, "a trace file ending in .csv")
    if st.st_size > MAX_TRACE_BYTES:
        raise InvalidInput(field, path, f"a trace of at most {MAX_TRACE_BYTES // 1024 // 1024} MiB")
    return found


def read_trace(path: object, origin: str = "cli", field: str = "trace") -> tuple[float, ...]:
    """Arrival times (s) from a CSV: first column, one a line, optional header; sorted. Errors name lines, not text."""
    found = allowed_trace_path(path, origin, field)
    times: list[float] = []
    try:
        with found.open(newline="", encoding="utf-8") as handle:
            for line_no, row in enumerate(csv.reader(handle), start=1):
                if not row or not row[0].strip():
                    continue
                try:
                    value = float(row[0])
                except ValueError:
                    if line_no == 1 and not times:
                        continue  # a header
                    raise InvalidInput(
                        field,
                        path,
                        "arrival times in seconds (a number first on each line)",
                        f"line {line_no} is not a number",
                    ) from None
                if not math.isfinite(value) or value < 0 or value > 365 * DAY_S:
                    raise InvalidInput(
                        field, path, "arrival times from 0 to 31536000 s", f"line {line_no} is out of range"
                    )
                times.append(value)
                if len(times) > MAX_TRACE_ARRIVALS:
                    raise InvalidInput(field, path, f"a trace of at most {MAX_TRACE_ARRIVALS} arrivals")
    except UnicodeDecodeError:
        raise InvalidInput(field, path, "a UTF-8 text CSV") from None
    except csv.Error:
        raise InvalidInput(field, path, "a CSV of arrival times") from None
    if not times:
        raise InvalidInput(field, path, "a CSV with at least one arrival time")
    return tuple(sorted(times))


def trace_traffic(path: str, origin: str = "cli", **bound: object) -> Traffic:
    """A Traffic from a trace CSV (checked and read here), with the bound fields given."""
    return Traffic.model_validate({"shape": "trace", "trace_path": path, "trace_s": read_trace(path, origin), **bound})


TRACE_IN_GOAL = r"\b(?:trace|arrivals?)\s+(?:file\s+)?(?:from\s+|in\s+|at\s+)?(\S+\.csv)\b"


def goal_traces(goal_text: str, origin: str) -> str:
    """`goal_text` with each trace file it names checked for `origin` and spelled as its resolved path.

    The goal parser reads a trace as the CLI would; an MCP tool passes its text through here first, so a
    remote client can name no file and a local one only files in the trace folder (refused before any start).
    """
    import re

    def resolved(match: re.Match[str]) -> str:
        path = allowed_trace_path(match.group(1), origin, "goal trace")
        return match.group(0).replace(match.group(1), str(path))

    return re.sub(TRACE_IN_GOAL, resolved, goal_text, flags=re.IGNORECASE)
