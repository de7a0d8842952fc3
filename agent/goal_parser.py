"""Goal parsing: a goal in plain words -> a Goal, or clear questions where the words are ambiguous.

The deterministic parser reads the common forms (a latency bound at a percentile, a throughput floor,
the objective, allowed GPUs, clouds and capacity, the budget, model and workload changes). Every part
of the text must be read by some rule: whatever is left over becomes a question, never a guess.
An optional chat model (LangChain `init_chat_model`, configured by environment settings) can read
freer text; its answer goes through the same Goal validation and is shown for confirmation.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from worldtune.policies.calibration import PROFILES_DIR
from worldtune.tools.errors import WorldtuneError
from worldtune.tools.goal import PERCENTILES, Goal
from worldtune.tools.gpus import GPUS
from worldtune.tools.offers import CATALOG_CLOUDS
from worldtune.tools.workload import SUPPORTED_SIZES, anchor_workload

# Environment settings of the optional LLM path (read only when set).
LLM_MODEL_ENV = "WORLDTUNE_LLM_MODEL"  # e.g. "openai:gpt-4.1" or "anthropic:claude-sonnet-4-5"
LLM_TEMPERATURE_ENV = "WORLDTUNE_LLM_TEMPERATURE"

INFRAS: tuple[str, ...] = (*CATALOG_CLOUDS, "kubernetes", "local")
# Short names for the resolutions people say; anything else must be given as WxH.
RESOLUTIONS: dict[str, tuple[int, int]] = {"720p": (1280, 720), "480p": (832, 480)}
# Words that carry no requirement once the rules have read the rest.
FILLER = frozenset(
    {
        "a",
        "an",
        "and",
        "or",
        "with",
        "the",
        "for",
        "of",
        "to",
        "on",
        "in",
        "at",
        "by",
        "is",
        "are",
        "be",
        "it",
        "its",
        "as",
        "per",
        "clip",
        "clips",
        "video",
        "videos",
        "please",
        "find",
        "me",
        "us",
        "give",
        "get",
        "want",
        "need",
        "needs",
        "i",
        "we",
        "our",
        "my",
        "deployment",
        "deploy",
        "serve",
        "serving",
        "generation",
        "generating",
        "generate",
        "t2v",
        "text-to-video",
        "text",
        "model",
        "ok",
        "okay",
        "allowed",
        "fine",
        "also",
        "should",
        "must",
        "can",
        "that",
        "which",
        "while",
        "but",
        "only",
        "any",
        "using",
        "use",
        "run",
        "running",
        "goal",
        "under",
        "one",
        "each",
        "frames",
        "steps",
        "s",
        "search",
        "tuning",
        "tune",
        "make",
        "sure",
        "keep",
        "best",
    }
)


class GoalQuestion(WorldtuneError):
    """The goal text cannot be read without guessing; carries the questions to ask the user."""

    def __init__(self, questions: list[str], text: str = "") -> None:
        self.questions = questions
        self.text = text
        super().__init__("the goal needs answers before tuning:\n" + "\n".join(f"- {q}" for q in questions))


class ParsedGoal(BaseModel):
    """A Goal with where it came from and the defaults that filled what the text did not say."""

    goal: Goal
    source: str = Field(description="'parser' or 'llm:<model>'")
    assumptions: list[str] = Field(default_factory=list, description="defaults applied, shown for confirmation")
    text: str = ""


class _Reader:
    """Consumes the parts of the text each rule reads, so what is left over can be asked about."""

    def __init__(self, text: str) -> None:
        self.original = text
        self.text = " " + text.lower().replace("≤", "<=").replace("×", "x").replace("–", "-") + " "
        self.questions: list[str] = []

    def take(self, pattern: str) -> list[re.Match[str]]:
        """Every match of `pattern`; the matched text is blanked so no other rule reads it again."""
        matches = list(re.finditer(pattern, self.text))
        for m in reversed(matches):
            self.text = self.text[: m.start()] + " " * (m.end() - m.start()) + self.text[m.end() :]
        return matches

    def ask(self, question: str) -> None:
        if question not in self.questions:
            self.questions.append(question)

    def number(self, raw: str, what: str) -> float | None:
        """`raw` as a finite number; a non-finite one (1e400) is asked about and gives None."""
        value = float(raw)
        if math.isfinite(value):
            return value
        self.ask(f"'{raw}' is not a number worldtune can use for {what}: give it in plain digits.")
        return None

    def once(self, found: dict[str, Any], key: str, value: Any, what: str) -> None:
        """Record `key`; the same constraint given twice with different values is asked about, never overwritten."""
        if key in found and found[key] != value:
            self.ask(f"The goal gives {what} twice ({found[key]} and {value}): which one?")
        found.setdefault(key, value)

    def leftovers(self) -> list[str]:
        words = re.findall(r"[a-z0-9$][a-z0-9$.%/'-]*", self.text)
        return [w for w in (w.strip(".-'") for w in words) if w and w not in FILLER]


_NUM = r"(\d+(?:\.\d+)?(?:e[+-]?\d+)?)"  # with an exponent: "$1e400" is one (non-finite) number
_SECONDS = {"s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0, "min": 60.0, "mins": 60.0}
_SECONDS |= {"minute": 60.0, "minutes": 60.0, "m": 60.0}
_UNDER = r"(?:under|below|<=?|at most|within|less than|no more than|not above|max(?:imum)?|of)"
_PERCENTILE = r"(?:p(\d{2})|(\d{2})(?:th)?[\s-]*percentile|(median))"
_UNIT = r"(s|secs?|seconds?|mins?|minutes?|m)?\b"
_OBJECTIVES: tuple[tuple[str, str], ...] = (
    (r"\b(?:cheapest|lowest[\s-]cost|least[\s-]expensive|min(?:imi[sz]e|imum)?[\s-]cost|cheap)"
     r"(?:\s+(?:per|a|each)\s+(?:clip|video))?\b|\bcost[\s-]per[\s-]clip\b", "min_cost_per_clip"),
    (r"\b(?:fastest|quickest|lowest[\s-]latency|min(?:imi[sz]e|imum)?[\s-]latency)\b", "min_latency"),
    (r"\b(?:highest[\s-]throughput|max(?:imi[sz]e|imum)?[\s-]throughput|most\s+clips(?:\s+per\s+hour)?)\b",
     "max_throughput"),
)  # fmt: skip


def _model(r: _Reader) -> str | None:
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


def _workload_changes(r: _Reader) -> dict[str, Any]:
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
    for m in r.take(r"\bguidance(?:[\s-]scale)?\s*(?:=|of|at)?\s*" + _NUM):
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


def _latency(r: _Reader) -> tuple[float | None, int | None]:
    bounds: dict[str, Any] = {}
    pattern = rf"\b(?:latency\s+)?{_PERCENTILE}\s*(?:latency\s*)?(?:{_UNDER}\s*)?{_NUM}\s*{_UNIT}"
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
        r.once(bounds, "bound", f"p{pct} under {value * _SECONDS[unit]:g} s", "the latency bound")
        bounds.setdefault("value", (value * _SECONDS[unit], pct))
    for m in r.take(rf"\b(?:mean\s+|average\s+|avg\s+)?latency\s*{_UNDER}?\s*{_NUM}\s*{_UNIT}"):
        r.ask(
            f"At which percentile must the latency bound of {m.group(1)} {m.group(2) or ''} hold: "
            f"{', '.join(f'p{p}' for p in PERCENTILES)}? (e.g. 'p95 under {m.group(1)} s')".replace("  ", " ")
        )
    for m in r.take(rf"\b{_UNDER}\s*{_NUM}\s*(s|secs?|seconds?|mins?|minutes?)\s*(?:per\s+clip|a\s+clip|each)?\b"):
        r.ask(f"Is '{m.group(0).strip()}' a latency bound? Say at which percentile, e.g. 'p95 under {m.group(1)} s'.")
    if "value" not in bounds:
        return None, None
    bound, percentile = bounds["value"]
    return bound, percentile


def _throughput(r: _Reader) -> float | None:
    floors: dict[str, Any] = {}
    per = {"h": 1.0, "hr": 1.0, "hour": 1.0, "min": 60.0, "minute": 60.0, "day": 1 / 24}
    pattern = (
        r"\b(?:(?:at\s+least|>=?|minimum(?:\s+of)?|min|no\s+fewer\s+than|no\s+less\s+than|sustain(?:ing)?)\s*)?"
        + _NUM
        + r"\s*(?:clips?|videos?)\s*(?:/|per|an|a|every)\s*(hour|hr|h|minute|min|day)\b"
    )
    for m in r.take(pattern):
        value = r.number(m.group(1), "the throughput floor")
        if value is not None:
            r.once(floors, "floor", value * per[m.group(2)], "the throughput floor (clips per hour)")
    return floors.get("floor")


def _objective(r: _Reader) -> str | None:
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


def _gpus(r: _Reader) -> tuple[list[str] | None, list[str]]:
    allowed: list[str] = []
    excluded: list[str] = []
    known = {name.lower(): name for name in GPUS}
    calibrated = sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))
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


def _infras(r: _Reader) -> list[str]:
    found: list[str] = []
    names = "|".join(re.escape(i) for i in INFRAS)
    for m in r.take(rf"\b(?:on|in|at|via|from)?\s*({names})(?:\s+only)?\b"):
        if m.group(1) not in found:
            found.append(m.group(1))
    return found


def _capacities(r: _Reader) -> list[str] | None:
    caps: list[str] | None = None
    only_spot = bool(r.take(r"\b(?:spot\s+only|only\s+spot)\b"))
    no_spot = bool(r.take(r"\b(?:no|not|without|avoid)\s+spot\b|\bon[\s-]demand\s+only\b|\bonly\s+on[\s-]demand\b"))
    spot_ok = bool(r.take(
        r"\bspot\s+(?:is\s+)?(?:ok|okay|allowed|fine|welcome|acceptable)\b|\ballow(?:ing)?\s+spot\b"
        r"|\b(?:on[\s-]demand\s+or\s+spot|spot\s+or\s+on[\s-]demand)\b|\b(?:use|with)\s+spot\b"
    ))  # fmt: skip
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


def _budget(r: _Reader) -> float | None:
    budgets: dict[str, Any] = {}
    money = r"\$\s*" + _NUM + r"\s*(k)?|" + _NUM + r"\s*(k)?\s*(?:usd|dollars?)"

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
    for m in r.take(r"\bbudget(?:\s+(?:of|is))?\s*" + _NUM + r"\b"):
        value = r.number(m.group(1), "the budget")
        if value is not None:
            r.once(budgets, "usd", value, "the budget")
    for m in r.take(rf"(?:{money})"):
        r.ask(
            f"What is '{m.group(0).strip()}' for? Say 'budget {m.group(0).strip()}' if it is what the search may spend."
        )
    return budgets.get("usd")


def _answer_within(r: _Reader) -> float | None:
    """'answer within 1 hour', 'done in 90 minutes', 'within 2 h': the time to a verified answer, in seconds."""
    found: dict[str, Any] = {}
    unit = r"(hours?|hrs?|h|minutes?|mins?|m)\b"
    for m in r.take(r"\b(?:(?:an\s+)?answer(?:ed)?|done|verified|results?)?\s*(?:with)?in\s+" + _NUM + r"\s*" + unit):
        value = r.number(m.group(1), "the time to an answer")
        if value is not None:
            r.once(found, "s", value * (60.0 if m.group(2).startswith("m") else 3600.0), "the time to an answer")
    return found.get("s")


def _max_gpus(r: _Reader) -> int | None:
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
    r = _Reader(text)
    model = _model(r)
    answer_within = _answer_within(r)
    from worldtune.agent import goal_traffic  # its rules stand on this module's patterns

    traffic_found = goal_traffic.read_traffic(r)
    budget = _budget(r)
    throughput = _throughput(r)
    bound, percentile = _latency(r)
    changes = _workload_changes(r)
    objective = _objective(r)
    gpus, _excluded = _gpus(r)
    capacities = _capacities(r)
    text_infras = _infras(r)
    max_gpus = _max_gpus(r)
    for word in r.leftovers():
        r.ask(f"I could not read '{word}' in the goal: what does it ask for? (rephrase or remove it)")
    for run in re.findall(r"[^\x00-\x7f]+", r.text):  # the rules read English words and ASCII digits only
        r.ask(f"I could not read '{run.strip()}' in the goal: please write it in English words and digits.")
    traffic = goal_traffic.traffic_fields(traffic_found, bound, percentile, r) if "shape" in traffic_found else None
    read = (model, traffic, budget, throughput, bound, changes, objective, gpus, capacities, text_infras, max_gpus,
            answer_within)  # fmt: skip
    if not r.questions and all(v is None or v == {} or v == [] for v in read):
        r.ask("Nothing in the goal could be read: what should worldtune tune for? "
              "e.g. 'Cosmos3-Super, p95 under 150 s, cheapest per clip'")  # fmt: skip
    if gpus == []:
        r.ask(f"Every GPU type is excluded: which may be used ({', '.join(GPUS)})?")
    if r.questions:
        raise GoalQuestion(r.questions, text)

    assumptions: list[str] = []
    fields: dict[str, Any] = {}
    model_key = model or "cosmos3-super"
    if model is None:
        assumptions.append("model cosmos3-super (none named)")
    try:
        fields["workload"] = anchor_workload(model_key, **changes)
    except ValueError as exc:
        raise GoalQuestion([f"The workload is not valid: {_first_line(exc)}"], text) from exc
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
    if throughput is not None:
        fields["throughput_floor_clips_per_hour"] = throughput
    if gpus is not None:
        fields["gpus"] = gpus
    else:
        assumptions.append(f"GPUs: any calibrated ({', '.join(Goal().gpus)})")
    if capacities is not None:
        fields["capacities"] = capacities
    else:
        assumptions.append("capacity: on-demand only (say 'spot ok' to allow spot)")
    chosen_infras = infras if infras is not None else text_infras
    if chosen_infras:
        fields["infras"] = chosen_infras
    if max_gpus is not None:
        fields["max_gpus_per_node"] = max_gpus
    if answer_within is not None:
        fields["answer_within_s"] = answer_within
    if budget_usd is not None:
        fields["budget_usd"] = budget_usd
    elif budget is not None:
        fields["budget_usd"] = budget
    else:
        assumptions.append(f"search budget ${Goal().budget_usd:g} (default)")
    try:
        goal = Goal.model_validate(fields)
    except ValueError as exc:
        raise GoalQuestion([f"The goal is not valid: {_first_line(exc)}"], text) from exc
    return ParsedGoal(goal=goal, source="parser", assumptions=assumptions, text=text)


def _first_line(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(
            str(e["ctx"]["error"]) if "error" in e.get("ctx", {}) else f"{'.'.join(map(str, e['loc']))}: {e['msg']}"
            for e in exc.errors()
        )
    return str(exc).splitlines()[0]


# ---- the optional LLM path ----------------------------------------------------------------------------
ChatInvoke = Callable[[list[tuple[str, str]]], Any]


def configured_chat_model() -> Any | None:
    """The chat model the user configured ($WORLDTUNE_LLM_MODEL via LangChain's init_chat_model), or None."""
    name = os.environ.get(LLM_MODEL_ENV, "").strip()
    if not name:
        return None
    try:
        from langchain.chat_models import init_chat_model
    except ImportError as exc:
        raise GoalQuestion(
            [f"${LLM_MODEL_ENV}={name} is set but LangChain is not installed: pip install 'worldtune[llm]'"]
        ) from exc
    temperature = float(os.environ.get(LLM_TEMPERATURE_ENV, "0"))
    return init_chat_model(name, temperature=temperature)


def parse_goal_with_llm(
    text: str, chat_model: Any, budget_usd: float | None = None, infras: list[str] | None = None
) -> ParsedGoal:
    """Ask a chat model to fill the Goal's fields; validate them exactly as the parser's; questions pass through."""
    from worldtune.agent.prompts import GOAL_SYSTEM_PROMPT, goal_user_prompt

    reply = chat_model.invoke([("system", GOAL_SYSTEM_PROMPT), ("human", goal_user_prompt(text))])
    content = reply.content if hasattr(reply, "content") else str(reply)
    data = _json_object(content if isinstance(content, str) else json.dumps(content))
    if data is None:
        raise GoalQuestion(["The language model did not answer with a goal; rephrase, or unset " + LLM_MODEL_ENV])
    questions = [str(q) for q in data.pop("questions", []) or []]
    if questions:
        raise GoalQuestion(questions, text)
    workload_changes = data.pop("workload", {}) or {}
    model = str(workload_changes.pop("model", "cosmos3-super"))
    try:
        workload = anchor_workload(model, **workload_changes)
        if budget_usd is not None:
            data["budget_usd"] = budget_usd
        if infras is not None:
            data["infras"] = infras
        goal = Goal.model_validate({**data, "workload": workload})
    except ValueError as exc:
        raise GoalQuestion([f"The goal the language model read is not valid: {_first_line(exc)}"], text) from exc
    name = getattr(chat_model, "model_name", None) or getattr(chat_model, "model", None) or type(chat_model).__name__
    return ParsedGoal(goal=goal, source=f"llm:{name}", assumptions=["read by a language model: check it"], text=text)


def _json_object(content: str) -> dict[str, Any] | None:
    match = re.search(r"\{.*\}", content, re.DOTALL)
    if not match:
        return None
    try:
        data = json.loads(match.group(0))
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def read_goal(text: str, budget_usd: float | None = None, infras: list[str] | None = None) -> ParsedGoal:
    """The deterministic parser first; the configured chat model only for text the parser asks about."""
    try:
        return parse_goal(text, budget_usd, infras)
    except GoalQuestion:
        chat_model = configured_chat_model()
        if chat_model is None:
            raise
        return parse_goal_with_llm(text, chat_model, budget_usd, infras)
