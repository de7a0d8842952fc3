"""Ceilings no real user reaches, checked in the words every caller goes through (CLI, MCP, agent, Python).

Each bound is far above what the project's own goals use, so that a typo (`--budget 1e12`, `repeats=1000` with
100,000 concurrency levels) is refused before anything starts instead of being taken at its word. The values,
and why:
"""

from __future__ import annotations

from worldtune.tools.words.errors import InvalidInput

MAX_BUDGET_USD = 100_000.0  # a search's budget: ~3,500 node-hours of 8xH200 at $28/h; the default is $300
MAX_HOLD_HOURS = 720.0  # hours to keep a deployment up: 30 days (MCP `hours` had this ceiling already)
MAX_REPEATS = 1_000  # requests per client per level and per probe step count (a claim at p99/99% needs 459)
MAX_LEVELS = 32  # closed-loop concurrency levels in one benchmark
MAX_PROBES = 16  # probe step counts in one benchmark
MAX_PLANNED_REQUESTS = 20_000  # requests one benchmark may send in all (~30 days of 2-minute clips on 8 lanes)
MAX_POISSON_REQUESTS = 10_000  # open-loop arrivals in one benchmark


def at_most(field: str, value: float, ceiling: float, what: str) -> None:
    """Refuse `value` above `ceiling`, naming the field, the value and the bound."""
    if value > ceiling:
        raise InvalidInput(field, value, f"{what}, at most {ceiling:,g}", "a larger value is taken for a typo")
