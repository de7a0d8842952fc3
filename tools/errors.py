"""Errors that name the field, the value and what would be valid."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class WorldtuneError(Exception):
    """Base class of every error worldtune raises on purpose."""


class InvalidInput(WorldtuneError, ValueError):
    """A value a user gave is not acceptable; says which field, what value and what would do."""

    def __init__(self, field: str, value: Any, expected: str, hint: str | None = None) -> None:
        self.field = field
        self.value = value
        self.expected = expected
        self.hint = hint
        message = f"{field}={value!r} is not valid: {expected}"
        if hint:
            message += f" ({hint})"
        super().__init__(message)


def one_of(field: str, value: Any, choices: Iterable[Any]) -> InvalidInput:
    """An InvalidInput for a value outside a closed set, listing the set."""
    listed = ", ".join(repr(c) if not isinstance(c, str) else c for c in choices)
    return InvalidInput(field, value, f"expected one of: {listed}")
