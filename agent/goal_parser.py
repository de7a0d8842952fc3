"""Goal parsing: a goal in plain words -> a Goal, or clear questions where the words are ambiguous.

The deterministic parser reads the common forms (a latency bound at a percentile, a throughput floor,
the objective, allowed GPUs, clouds and capacity, the budget, model and workload changes). Every part
of the text must be read by some rule: whatever is left over becomes a question, never a guess.
An optional chat model (LangChain `init_chat_model`, configured by environment settings) can read
freer text; its answer goes through the same Goal validation and is shown for confirmation.
"""

from __future__ import annotations

import re
from typing import Any

from worldtune.agent import goal_traffic
from worldtune.agent.goal_llm import configured_chat_model, parse_goal_with_llm
from worldtune.agent.goal_reader import (
    NUM,
    PERCENTILE,
    SECONDS,
    UNDER,
    UNIT,
    GoalQuestion,
    ParsedGoal,
    Reader,
    first_line,
)
from worldtune.tools.plans.offers import CATALOG_CLOUDS
from worldtune.tools.plans.profile_paths import SHIPPED_DIR
from worldtune.tools.words.goal import DEFAULT_PRODUCTION_CLIPS, PERCENTILES, Goal
from worldtune.tools.words.gpus import GPUS
from worldtune.tools.words.workload import SUPPORTED_SIZES, anchor_workload

INFRAS: tuple[str, ...] = (*CATALOG_CLOUDS, "kubernetes", "local")
# Short names for the resolutions people say; anything else must be given as WxH.
RESOLUTIONS: dict[str, tuple[int, int]] = {"720p": (1280, 720), "480p": (832, 480)}


_OBJECTIVES: tuple[tuple[str, str], ...] = (
    (
        r"\b(?:cheapest|lowest[\s-]cost|least[\s-]expensive|min(?:imi[sz]e|imum)?[\s-]cost|cheap)"
        r"(?:\s+(?:per|a|each)\s+(?:clip|video))?\b|\bcost[\s-]per[\s-]clip\b",
        "min_cost_per_clip",
    ),
    (r"\b(?:fastest|quickest|lowest[\s-]latency|min(?:imi[sz]e|imum)?[\s-]latency)\b", "min_latency"),
    (
        r"\b(?:highest[\s-]throughput|max(?:imi[sz]e|imum)?[\s-]throughput|most\s+clips(?:\s+per\s+hour)?)\b",
        "max_throughput",
    ),
)


def _model(r: Reader) -> str | None:
    found: set[str] = set()
    if r.take(r"\b(?:cosmos[\s-]?3[\s-]?)?super[\s-]?(?:i2v|image[\s-]?2[\s-]?video)[\s-]?4[\s-]?steps?\b"):
        found.add("cosmos3-super-i2v-4step")
    for m in r.take(r"\b(?:nvidia/)?cosmos[\s-]?3[\s-]?(super|nano|edge)\b|\b(super|nano|edge)\b"):
        found.add(f"cosmos3-{m.group(1) or m.group(2)}")
    if r.take(r"\bcosmos[\s-]?3\b") and not found:
        found.add("cosmos3-super")
    if len(found) > 1:
        r.ask(f"Which model: {' or '.join(sorted(found))}? One tuning run serves one model.")
        return None
    return found.pop() if found else None


def _workload_changes(r: Reader) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    for m in r.take(r"\b(\d{3,4})\s*x\s*(\d{3,4})\b"):
        r.once(changes, "size", (int(m.group(1)), int(m.group(2))), "the frame size")
    for m in r.take(r"\b(\d{3,4})p\b"):
        key = f"{m.group(1)}p"
        if key in RESOLUTIONS:
            r.once(changes, "size", RESOLUTIONS[key], "the frame size")
        else:
            options = ", ".join(f"{w}x{h}" for w, h in SUPPORTED_SIZES if h == int(m.group(1)) or w == int(m.group(1)))
            r.ask(
                f"Which size is {key}? Say it as WIDTHxHEIGHT"
                + (f" ({options})" if options else " (720p = 1280x720 and 480p = 832x480 are known)")
                + "."
            )
    for m in r.take(r"\b(\d{1,4})[\s-]*frames?\b"):
        r.once(changes, "num_frames", int(m.group(1)), "the frame count")
    for m in r.take(r"\b(?:at\s+)?(\d{2})\s*fps\b"):
        r.once(changes, "fps", int(m.group(1)), "the frame rate")
    for m in r.take(r"\b(\d{1,3})[\s-]*(?:denoising\s+|inference\s+|diffusion\s+)?steps?\b"):
        r.once(changes, "steps", int(m.group(1)), "the step count")
    for m in r.take(r"\bguidance(?:[\s-]scale)?\s*(?:=|of|at)?\s*" + NUM):
        value = r.number(m.group(1), "the guidance scale")
        if value is not None:
            r.once(changes, "guidance_scale", value, "the guidance scale")
    if r.take(r"\b(?:no|without|disable|disabled)\s+guardrails?\b|\bguardrails?\s+(?:off|disabled)\b"):
        r.once(changes, "guardrails", False, "guardrails (off)")
    if r.take(r"\b(?:with|enable|enabled)\s+guardrails?\b|\bguardrails?\s+(?:on|enabled)\b"):
        r.once(changes, "guardrails", True, "guardrails (on)")
    if r.take(r"\b(i2v|image[\s-]to[\s-]video)\b"):
        changes["task"] = "i2v"
    if "size" in changes:
        changes["width"], changes["height"] = changes.pop("size")
    return changes


def _latency(r: Reader) -> tuple[float | None, int | None]:
    bounds: dict[str, Any] = {}
    pattern = rf"\b(?:latency\s+)?{PERCENTILE}\s*(?:latency\s*)?(?:{UNDER}\s*)?{NUM}\s*{UNIT}"
    for m in r.take(pattern):
        pct = int(m.group(1) or m.group(2) or 50)
        if pct not in PERCENTILES:
            r.ask(f"Latency bound at p{pct}: which percentile, {', '.join(f'p{p}' for p in PERCENTILES)}?")
            continue
        value, unit = r.number(m.group(4), f"the p{pct} bound"), m.group(5)
        if value is None:
            continue
        if unit is None:
            r.ask(f"Is the p{pct} bound of {value:g} in seconds or minutes (e.g. 'p{pct} under {value:g} s')?")
            continue
        r.once(bounds, "bound", f"p{pct} under {value * SECONDS[unit]:g} s", "the latency bound")
        bounds.setdefault("value", (value * SECONDS[unit], pct))
    for m in r.take(rf"\b(?:mean\s+|average\s+|avg\s+)?latency\s*{UNDER}?\s*{NUM}\s*{UNIT}"):
        r.ask(
            f"At which percentile must the latency bound of {m.group(1)} {m.group(2) or ''} hold: "
            f"{', '.join(f'p{p}' for p in PERCENTILES)}? (e.g. 'p95 under {m.group(1)} s')".replace("  ", " ")
        )
    for m in r.take(rf"\b{UNDER}\s*{NUM}\s*(s|secs?|seconds?|mins?|minutes?)\s*(?:per\s+clip|a\s+clip|each)?\b"):
        r.ask(f"Is '{m.group(0).strip()}' a latency bound? Say at which percentile, e.g. 'p95 under {m.group(1)} s'.")
    if "value" not in bounds:
        return None, None
    bound, percentile = bounds["value"]
    return bound, percentile


def _throughput(r: Reader) -> float | None:
    floors: dict[str, Any] = {}
    per = {"h": 1.0, "hr": 1.0, "hour": 1.0, "min": 60.0, "minute": 60.0, "day": 1 / 24}
    pattern = (
        r"\b(?:(?:at\s+least|>=?|minimum(?:\s+of)?|min|no\s+fewer\s+than|no\s+less\s+than|sustain(?:ing)?)\s*)?"
        + NUM
        + r"\s*(?:clips?|videos?)\s*(?:/|per|an|a|every)\s*(hour|hr|h|minute|min|day)\b"
    )
    for m in r.take(pattern):
        value = r.number(m.group(1), "the throughput floor")
        if value is not None:
            r.once(floors, "floor", value * per[m.group(2)], "the throughput floor (clips per hour)")
    return floors.get("floor")


def _objective(r: Reader) -> str | None:
    found: list[str] = []
    for pattern, objective in _OBJECTIVES:
        if r.take(pattern) and objective not in found:
            found.append(objective)
    if len(found) > 1:
        words = {
            "min_cost_per_clip": "cheapest per clip",
            "min_latency": "fastest",
            "max_throughput": "most clips/hour",
        }
        r.ask(
            f"Which should win when they disagree: {' or '.join(words[f] for f in found)}? "
            "Give one objective and state the others as bounds (e.g. 'cheapest per clip, p95 under 150 s')."
        )
        return None
    return found[0] if found else None


def _gpus(r: Reader) -> tuple[list[str] | None, list[str]]:
    allowed: list[str] = []
    excluded: list[str] = []
    known = {name.lower(): name for name in GPUS}
    calibrated = sorted(p.stem for p in SHIPPED_DIR.glob("*.yaml"))  # the GPU types with a shipped profile
    gpu_word = r"([a-z]{1,2}\d{2,3}[a-z]?)"
    for m in r.take(rf"\b(?:no|not|without|except|excluding|avoid)\s+{gpu_word}s?\b"):
        if m.group(1) in known:
            excluded.append(known[m.group(1)])
        else:
            r.ask(f"Unknown GPU type '{m.group(1)}': known are {', '.join(GPUS)}.")
    for m in r.take(rf"\b(?:\d\s*x\s*)?{gpu_word}s?\b(?:\s+only)?"):
        name = m.group(1)
        if name in known and known[name] not in calibrated:
            r.ask(
                f"{known[name]} has no calibrated profile yet (calibrated: {', '.join(calibrated)}): "
                "choose among those, or calibrate it first."
            )
        elif name in known:
            if known[name] not in allowed:
                allowed.append(known[name])
        elif re.fullmatch(r"[a-z]\d{2,3}[a-z]?", name) and not re.fullmatch(r"p\d{2}", name):
            r.ask(f"Unknown GPU type '{name.upper()}': worldtune knows {', '.join(GPUS)}.")
        else:  # not a GPU after all (e.g. a word with digits): give it back to the leftovers
            r.text = r.text[: m.start()] + m.group(0) + r.text[m.end() :]
    if not allowed and not excluded:
        return None, []
    chosen = allowed or [g for g in Goal().gpus if g not in excluded]
    return [g for g in chosen if g not in excluded], excluded


def _infras(r: Reader) -> list[str]:
    found: list[str] = []
    names = "|".join(re.escape(i) for i in INFRAS)
    for m in r.take(rf"\b(?:on|in|at|via|from)?\s*({names})(?:\s+only)?\b"):
        if m.group(1) not in found:
            found.append(m.group(1))
    return found


def _allow_fp8(r: Reader) -> bool | None:
    """'fp8 ok' allows the quality-changing FP8 plans; 'no fp8' / 'bf16 only' says so; silence is BF16."""
    no = bool(r.take(r"\b(?:no|not|without|avoid)\s+fp8\b|\bbf16\s+only\b|\bonly\s+bf16\b"))
    ok = bool(r.take(r"\bfp8\s+(?:is\s+)?(?:ok|okay|allowed|fine|acceptable)\b|\ballow(?:ing)?\s+fp8\b"))
    if no and ok:
        r.ask("The goal says both 'fp8 ok' and 'no fp8': may the generator run in FP8 (it changes the clips)?")
        return None
    return True if ok else (False if no else None)


def _capacities(r: Reader) -> list[str] | None:
    caps: list[str] | None = None
    only_spot = bool(r.take(r"\b(?:spot\s+only|only\s+spot)\b"))
    no_spot = bool(r.take(r"\b(?:no|not|without|avoid)\s+spot\b|\bon[\s-]demand\s+only\b|\bonly\s+on[\s-]demand\b"))
    spot_ok = bool(
        r.take(
            r"\bspot\s+(?:is\s+)?(?:ok|okay|allowed|fine|welcome|acceptable)\b|\ballow(?:ing)?\s+spot\b"
            r"|\b(?:on[\s-]demand\s+or\s+spot|spot\s+or\s+on[\s-]demand)\b|\b(?:use|with)\s+spot\b"
        )
    )
    if no_spot and (only_spot or spot_ok):
        said = "spot only" if only_spot else "spot ok"
        r.ask(f"The goal says both '{said}' and 'no spot' (or on-demand only): may spot capacity be used?")
        return None
    if only_spot:
        caps = ["spot"]
    if no_spot:
        caps = ["on-demand"]
    if spot_ok:
        caps = sorted({*(caps or ["on-demand"]), "spot"}, key=["on-demand", "spot", "serverless"].index)
    if r.take(r"\b(?:serverless|scale[\s-]to[\s-]zero)(?:\s+(?:is\s+)?(?:ok|okay|allowed|fine))?\b"):
        caps = sorted({*(caps or ["on-demand"]), "serverless"}, key=["on-demand", "spot", "serverless"].index)
    if caps is None and r.take(r"\bon[\s-]demand\b"):
        caps = ["on-demand"]
    return caps


def _budget(r: Reader) -> float | None:
    budgets: dict[str, Any] = {}
    money = r"\$\s*" + NUM + r"\s*(k)?|" + NUM + r"\s*(k)?\s*(?:usd|dollars?)"

    def amount(m: re.Match[str], first: int) -> None:
        value = r.number(m.group(first) or m.group(first + 2), "the budget")
        if value is not None:
            usd = value * (1000 if (m.group(first + 1) or m.group(first + 3)) else 1)
            r.once(budgets, "usd", usd, "the budget")

    for m in r.take(rf"(?:{money})\s*(?:/|per|a|an|each)\s*(clip|video|hour|hr|h)\b"):
        r.ask(
            f"'{m.group(0).strip()}' is a price ceiling, which worldtune does not take as a bound: "
            "say 'cheapest per clip' to minimise cost, and 'budget $N' for what the search may spend."
        )
    lead = (
        r"(?:budget(?:\s+(?:of|is))?|spend(?:ing)?(?:\s+(?:up\s+to|at\s+most|no\s+more\s+than))?"
        r"|at\s+most|up\s+to|max(?:imum)?|cap(?:ped)?\s+at|<=?)"
    )
    trail = r"(?:budget|to\s+find\s+out|for\s+(?:the\s+)?(?:search|tuning)|on\s+(?:the\s+)?search|search\s+budget)"
    for m in r.take(rf"\b{lead}\s*(?:{money})(?:\s*{trail})?"):
        amount(m, 1)
    for m in r.take(rf"(?:{money})\s*{trail}"):
        amount(m, 1)
    for m in r.take(r"\bbudget(?:\s+(?:of|is))?\s*" + NUM + r"\b"):
        value = r.number(m.group(1), "the budget")
        if value is not None:
            r.once(budgets, "usd", value, "the budget")
    for m in r.take(rf"(?:{money})"):
        r.ask(
            f"What is '{m.group(0).strip()}' for? Say 'budget {m.group(0).strip()}' if it is what the search may spend."
        )
    return budgets.get("usd")


def _answer_within(r: Reader) -> float | None:
    """'answer within 1 hour', 'done in 90 minutes', 'within 2 h': the time to a verified answer, in seconds."""
    found: dict[str, Any] = {}
    unit = r"(hours?|hrs?|h|minutes?|mins?|m)\b"
    for m in r.take(r"\b(?:(?:an\s+)?answer(?:ed)?|done|verified|results?)?\s*(?:with)?in\s+" + NUM + r"\s*" + unit):
        value = r.number(m.group(1), "the time to an answer")
        if value is not None:
            r.once(found, "s", value * (60.0 if m.group(2).startswith("m") else 3600.0), "the time to an answer")
    return found.get("s")


def _confidence(r: Reader) -> float | None:
    """'at 99% confidence', '99% confident', 'with 95% confidence': one level for the claim and the stop."""
    found: dict[str, Any] = {}
    for m in r.take(r"\b(?:(?:at|with)\s+)?" + NUM + r"\s*%\s*(?:confidence|confident|sure)\b"):
        value = r.number(m.group(1), "the confidence")
        if value is not None:
            r.once(found, "c", value / 100.0, "the confidence")
    return found.get("c")


def _production(r: Reader) -> float | None:
    """'for 50,000 clips', 'making 2m videos', '100k clips in production': the clips the answer will make, which is
    what a better plan's saving per clip is multiplied by (a measurement is bought only when worth its cost)."""
    found: dict[str, Any] = {}
    scale = {"": 1.0, "k": 1e3, "thousand": 1e3, "m": 1e6, "million": 1e6}
    lead = r"(?:for|making|to\s+make|producing|to\s+produce|production\s+of)\s+"
    count = r"(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)\s*(k|thousand|m|million)?\s*(?:clips?|videos?)\b"
    rate = r"(?!\s*(?:/|per\b|an?\s+|each\b|every\b))"  # '20 clips per hour' is a throughput floor
    for pattern in (rf"\b{lead}{count}(?:\s+in\s+production)?{rate}", rf"\b{count}\s+in\s+production\b"):
        for m in r.take(pattern):
            value = r.number(m.group(1).replace(",", ""), "the clips the answer will make")
            if value is not None:
                r.once(found, "n", value * scale[m.group(2) or ""], "the clips the answer will make")
    return found.get("n")


def _max_gpus(r: Reader) -> int | None:
    found = None
    for m in r.take(r"\b(?:at\s+most|up\s+to|max(?:imum)?|no\s+more\s+than|<=?)\s*(\d)\s*gpus?(?:\s+per\s+node)?\b"):
        found = int(m.group(1))
    return found


def parse_goal(text: str, budget_usd: float | None = None, infras: list[str] | None = None) -> ParsedGoal:
    """Read a goal in plain words; raise GoalQuestion naming every part that would need a guess.

    budget_usd / infras: values from the command line; they win over the text.
    """
    if not text.strip():
        raise GoalQuestion(["What should worldtune tune for? e.g. 'Cosmos3-Super, p95 under 150 s, cheapest per clip'"])
    r = Reader(text)
    read = _read(r)
    if r.questions:
        raise GoalQuestion(r.questions, text)
    fields, assumptions = _fields(read, text, budget_usd, infras)
    try:
        goal = Goal.model_validate(fields)
    except ValueError as exc:
        raise GoalQuestion([f"The goal is not valid: {first_line(exc)}"], text) from exc
    return ParsedGoal(goal=goal, source="parser", assumptions=assumptions, text=text)


def _read(r: Reader) -> dict[str, Any]:
    """Every rule's reading of the text (in an order where a longer phrase is read before its parts), and a
    question for whatever no rule read."""
    read: dict[str, Any] = {"model": _model(r), "answer_within": _answer_within(r), "confidence": _confidence(r)}
    traffic_found = goal_traffic.read_traffic(r)
    read |= {"budget": _budget(r), "throughput": _throughput(r)}
    read["bound"], read["percentile"] = _latency(r)
    read |= {"changes": _workload_changes(r), "objective": _objective(r)}
    read["production"] = _production(r)
    read["gpus"], _excluded = _gpus(r)
    read |= {"capacities": _capacities(r), "infras": _infras(r), "max_gpus": _max_gpus(r), "fp8": _allow_fp8(r)}
    unread = list(r.leftovers())
    if unread:
        r.ask(unread_question(unread, read, r.original))
    negative = re.search(r"(?<![\w.])-\s*\$?\d[\d.]*", r.original)
    if negative:  # a rule reads the digits, never the sign: "-3 clips per hour" must not become 3
        r.ask(f"'{negative.group(0)}' is negative: numbers in a goal are positive. A goal that reads: {EXAMPLE_GOAL}")
    for run in re.findall(r"[^\x00-\x7f]+", r.text):  # the rules read English words and ASCII digits only
        r.ask(f"I could not read '{run.strip()}' in the goal: please write it in English words and digits.")
    shaped = "shape" in traffic_found
    read["traffic"] = (
        goal_traffic.traffic_fields(traffic_found, read["bound"], read["percentile"], r) if shaped else None
    )
    if not r.questions and all(v is None or v == {} or v == [] for k, v in read.items() if k != "percentile"):
        r.ask(
            "Nothing in the goal could be read: what should worldtune tune for? "
            "e.g. 'Cosmos3-Super, p95 under 150 s, cheapest per clip'"
        )
    if read["gpus"] == []:
        r.ask(f"Every GPU type is excluded: which may be used ({', '.join(GPUS)})?")
    return read


EXAMPLE_GOAL = "'Cosmos3-Super, p95 under 150 s, cheapest per clip, budget $300'"


def unread_question(words: list[str], read: dict[str, Any], text: str) -> str:
    """One question for the words no rule read: which they are, what was read, what conflicts, a goal that reads."""
    said = ", ".join(f"'{w}'" for w in words)
    so_far = read_so_far(read)
    question = f"I could not read {said} in the goal (read so far: {so_far or 'nothing'})"
    lowered = [w.lower().strip(".,;:") for w in words]
    hints = []
    percentiles = [w for w in lowered if re.fullmatch(r"p\d{2}", w)]
    if percentiles and read.get("bound") is not None:
        hints.append(
            f"it conflicts with p{read['percentile']} <= {read['bound']:g} s, already read: give one latency "
            "bound, as 'under N s'"
        )
    elif percentiles:
        hints.append(f"'{percentiles[0]}' needs a bound in seconds, e.g. '{percentiles[0]} under 150 s'")
    if any(w.lstrip("$") in ("inf", "infinity", "nan", "unlimited") for w in lowered):
        hints.append("a budget is a finite dollar amount, e.g. 'budget $300'")
    if any(w in ("over", "above", "more", "least") for w in lowered) and not percentiles:
        hints.append(
            "a latency goal is an upper bound ('p95 under 150 s'), a throughput goal a floor ('at least "
            "40 clips per hour')"
        )
    hint = ": " + "; ".join(hints) if hints else ""
    return f"{question}{hint}. Rephrase or remove it; a goal that reads: {EXAMPLE_GOAL}"


def read_so_far(read: dict[str, Any]) -> str:
    """What the rules read, in the goal's own terms (for a question about the rest)."""
    parts = []
    if read.get("model"):
        parts.append(str(read["model"]))
    if read.get("bound") is not None:
        parts.append(f"p{read['percentile']} <= {read['bound']:g} s")
    if read.get("throughput") is not None:
        parts.append(f">= {read['throughput']:g} clips/h")
    if read.get("objective"):
        parts.append(str(read["objective"]).replace("_", " "))
    if read.get("gpus"):
        parts.append("GPUs " + "/".join(read["gpus"]))
    if read.get("capacities"):
        parts.append("capacity " + "/".join(read["capacities"]))
    if read.get("budget") is not None:
        parts.append(f"budget ${read['budget']:g}")
    return ", ".join(parts)


def _fields(
    read: dict[str, Any], text: str, budget_usd: float | None, infras: list[str] | None
) -> tuple[dict[str, Any], list[str]]:
    """The Goal's fields from what was read (the command line's budget and clouds win), and the defaults that
    filled what the text did not say."""
    assumptions: list[str] = []
    fields: dict[str, Any] = {}
    model, objective, traffic = read["model"], read["objective"], read["traffic"]
    bound, percentile = read["bound"], read["percentile"]
    if model is None:
        assumptions.append("model cosmos3-super (none named)")
    try:
        fields["workload"] = anchor_workload(model or "cosmos3-super", **read["changes"])
    except ValueError as exc:
        raise GoalQuestion([f"The workload is not valid: {first_line(exc)}"], text) from exc
    if traffic is not None:
        fields["traffic"] = traffic
        assumptions += goal_traffic.assumptions(traffic, objective)
        if traffic.e2e_bound_s is not None and bound is None:
            bound, percentile = traffic.e2e_bound_s, traffic.e2e_percentile
        objective = objective or "min_cost_per_clip"
    if objective is None:
        objective = "min_cost_per_clip"
        assumptions.append("objective: cheapest per clip (none named)")
    fields["objective"] = objective
    if bound is not None:
        fields["latency_bound_s"], fields["latency_percentile"] = bound, percentile
    if read["throughput"] is not None:
        fields["throughput_floor_clips_per_hour"] = read["throughput"]
    if read["gpus"] is not None:
        fields["gpus"] = read["gpus"]
    else:
        assumptions.append(f"GPUs: any calibrated ({', '.join(Goal().gpus)})")
    if read["capacities"] is not None:
        fields["capacities"] = read["capacities"]
    else:
        assumptions.append("capacity: on-demand only (say 'spot ok' to allow spot)")
    chosen_infras = infras if infras is not None else read["infras"]
    if chosen_infras:
        fields["infras"] = chosen_infras
    if read["max_gpus"] is not None:
        fields["max_gpus_per_node"] = read["max_gpus"]
    if read["answer_within"] is not None:
        fields["answer_within_s"] = read["answer_within"]
    if read["fp8"]:
        fields["allow_fp8"] = True
    if read["confidence"] is not None:
        fields["confidence"] = read["confidence"]
    if read["production"] is not None:
        fields["production_clips"] = read["production"]
    elif read["traffic"] is None:
        assumptions.append(
            f"production: {DEFAULT_PRODUCTION_CLIPS:,.0f} clips (what a better plan is worth; say 'for N clips')"
        )
    budget = budget_usd if budget_usd is not None else read["budget"]
    if budget is not None:
        fields["budget_usd"] = budget
    else:
        assumptions.append(f"search budget ${Goal().budget_usd:g} (default)")
    return fields, assumptions


def read_goal(text: str, budget_usd: float | None = None, infras: list[str] | None = None) -> ParsedGoal:
    """The deterministic parser first; the configured chat model only for text the parser asks about."""
    try:
        return parse_goal(text, budget_usd, infras)
    except GoalQuestion:
        chat_model = configured_chat_model()
        if chat_model is None:
            raise
        return parse_goal_with_llm(text, chat_model, budget_usd, infras)
