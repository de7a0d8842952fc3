"""The goal parser's traffic rules: arrival rates and shapes, the end-to-end bound, and 'cheapest per day'.

Read before the one-clip rules (a '300 clips/day between 8:00 and 20:00' is traffic, not a throughput
floor; 'p95 under 10 min including queueing' is end to end, not one clip's latency). Whatever cannot be
read without guessing becomes a question, as everywhere in the parser.
"""

from __future__ import annotations

import re
from typing import Any

from worldtune.agent.goal_reader import NUM, PERCENTILE, SECONDS, UNDER, UNIT, Reader, first_line
from worldtune.tools.words.errors import WorldtuneError
from worldtune.tools.words.traffic import TRACE_IN_GOAL, Traffic, trace_traffic

_PER_HOUR = {"hour": 1.0, "hr": 1.0, "h": 1.0, "minute": 60.0, "min": 60.0, "day": 1 / 24}
_E2E_TAIL = (
    r"(?:including\s+(?:the\s+)?(?:queueing|queuing|queue(?:\s+wait)?|waiting|wait)(?:\s+time)?"
    r"|end[\s-]to[\s-]end|e2e)"
)
_HOUR = r"(\d{1,2})(?::(\d{2}))?\s*(am|pm)?"
_SPAN = {"hours": 3600.0, "hour": 3600.0, "h": 3600.0, "hr": 3600.0, "minutes": 60.0, "minute": 60.0, "min": 60.0}
_SPAN |= {"mins": 60.0, "hrs": 3600.0}


def _hour(r: Reader, h: str, m: str | None, ampm: str | None) -> float | None:
    value = int(h) % 12 + (12 if ampm == "pm" else 0) if ampm else int(h)
    hours = value + int(m or 0) / 60
    if not 0 <= hours <= 24 or int(m or 0) >= 60:
        r.ask(f"'{h}:{m or '00'}' is not an hour of the day: give the window as e.g. 'between 8:00 and 20:00'.")
        return None
    return hours


def _shapes(r: Reader, found: dict[str, Any]) -> None:
    window = rf"\b{NUM}\s*(?:clips?|videos?|requests?)\s*(?:/|per|a|each)\s*day\s+(?:between|from)\s+{_HOUR}"
    for m in r.take(window + rf"\s+(?:and|to|-)\s+{_HOUR}"):
        start, end = _hour(r, m.group(2), m.group(3), m.group(4)), _hour(r, m.group(5), m.group(6), m.group(7))
        count = r.number(m.group(1), "the clips per day")
        if None not in (start, end, count):
            r.once(
                found,
                "shape",
                {"shape": "daily_window", "clips_per_day": count, "window_start_h": start, "window_end_h": end},
                "the traffic",
            )
    for m in r.take(rf"\b{NUM}\s*(?:requests?|reqs?|arrivals?)\s*(?:/|per|an|a|every)\s*(hour|hr|h|minute|min|day)\b"):
        rate = r.number(m.group(1), "the arrival rate")
        if rate is not None:
            r.once(found, "shape", {"shape": "poisson", "rate_per_hour": rate * _PER_HOUR[m.group(2)]}, "the traffic")
    bursts = r"\bbursts?\s+of\s+(\d+)\s*(?:requests?|clips?|videos?)?\s+every\s+(\d+(?:\.\d+)?)?\s*"
    for m in r.take(bursts + r"(hours?|hrs?|h|minutes?|mins?|min)\b"):
        every = float(m.group(2) or 1) * _SPAN[m.group(3)]
        r.once(
            found, "shape", {"shape": "bursts", "burst_size": int(m.group(1)), "burst_every_s": every}, "the traffic"
        )
    for m in re.finditer(TRACE_IN_GOAL, r.original, re.I):
        r.take(re.escape(m.group(0).lower()))
        r.once(found, "shape", {"shape": "trace", "trace_path": m.group(1)}, "the traffic")


def _e2e(r: Reader, found: dict[str, Any]) -> None:
    tail = rf"{PERCENTILE}\s*(?:latency\s*)?(?:{UNDER}\s*)?{NUM}\s*{UNIT}"
    for m in [*r.take(rf"\b{tail}\s*,?\s*{_E2E_TAIL}"), *r.take(rf"\b{_E2E_TAIL}\s*(?:latency\s*)?,?\s*{tail}")]:
        pct = int(m.group(1) or m.group(2) or 50)
        value = r.number(m.group(4), f"the p{pct} end-to-end bound")
        if m.group(5) is None:
            r.ask(f"Is the p{pct} end-to-end bound of {m.group(4)} in seconds or minutes?")
        elif value is not None:
            r.once(found, "e2e", (value * SECONDS[m.group(5)], pct), "the end-to-end bound")


def read_traffic(r: Reader) -> dict[str, Any]:
    """The traffic parts of the goal: {'traffic': fields} when arrivals are named; 'per_day' when asked for."""
    found: dict[str, Any] = {}
    _shapes(r, found)
    _e2e(r, found)
    if r.take(
        r"\b(?:cheapest|lowest[\s-]cost|least[\s-]expensive|min(?:imi[sz]e)?[\s-]cost)\s+(?:per|a|each)\s+day\b"
        r"|\b(?:daily|per[\s-]day)\s+cost\b"
    ):
        found["per_day"] = True
    if "shape" not in found and ("e2e" in found or "per_day" in found):
        r.ask(
            "An end-to-end bound or a daily cost needs the traffic: how do requests arrive? "
            "(e.g. '40 requests/hour', '300 clips/day between 8:00 and 20:00', 'bursts of 50 every 2 hours', "
            "'trace arrivals.csv')"
        )
    return found


def traffic_fields(found: dict[str, Any], bound: float | None, percentile: int | None, r: Reader) -> Traffic | None:
    """The Traffic the rules read (a trace file read and checked here), or None with a question asked."""
    fields = dict(found["shape"])
    if "e2e" in found:
        fields["e2e_bound_s"], fields["e2e_percentile"] = found["e2e"]
    elif bound is not None:
        said = f"p{percentile} under {bound:g} s"
        r.ask(
            f"With traffic, is the p{percentile} bound of {bound:g} s one clip's own latency or end to end "
            f"including the queue wait? Say '{said} including queueing' for the latter."
        )
        return None
    fields["objective"] = "min_cost_per_day" if found.get("per_day") else "min_cost_per_clip"
    try:
        if fields.get("shape") == "trace":
            path = fields.pop("trace_path")
            fields.pop("shape")
            return trace_traffic(path, "cli", **fields)
        return Traffic.model_validate(fields)
    except (WorldtuneError, ValueError) as exc:
        r.ask(f"The traffic is not valid: {first_line(exc)}")
        return None


def assumptions(traffic: Traffic, objective: str | None) -> list[str]:
    """What the parser assumed around the traffic, shown for confirmation."""
    out = []
    if traffic.e2e_bound_s is not None:
        out.append(
            f"one clip's own p{traffic.e2e_percentile} must fit the end-to-end bound too (the plan search's bound)"
        )
    else:
        out.append("no end-to-end bound: the fleet is sized for a stable queue only")
    if objective is None:
        out.append("plans ranked by cost per clip; the fleet by " + traffic.objective.replace("_", " "))
    return out
