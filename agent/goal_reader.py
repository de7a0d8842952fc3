"""What the goal parser's rules read with: the text being consumed, the shared patterns, and the errors.

goal_parser's rules and goal_traffic's rules both stand on this module, so neither imports the other's internals.
"""

from __future__ import annotations

import math
import re
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from worldtune.tools.words.errors import WorldtuneError
from worldtune.tools.words.goal import Goal

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


class Reader:
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


NUM = r"(\d+(?:\.\d+)?(?:e[+-]?\d+)?)"  # with an exponent: "$1e400" is one (non-finite) number
SECONDS = {"s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0, "min": 60.0, "mins": 60.0}
SECONDS |= {"minute": 60.0, "minutes": 60.0, "m": 60.0}
UNDER = r"(?:under|below|<=?|at most|within|less than|no more than|not above|max(?:imum)?|of)"
PERCENTILE = r"(?:p(\d{2})|(\d{2})(?:th)?[\s-]*percentile|(median))"
UNIT = r"(s|secs?|seconds?|mins?|minutes?|m)?\b"


def first_line(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(
            str(e["ctx"]["error"]) if "error" in e.get("ctx", {}) else f"{'.'.join(map(str, e['loc']))}: {e['msg']}"
            for e in exc.errors()
        )
    return str(exc).splitlines()[0]
