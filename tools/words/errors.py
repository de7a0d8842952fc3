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


class MissingExtra(WorldtuneError):
    """A command needs an optional dependency group that this install lacks; says which one to install."""

    def __init__(self, what: str, module: str, extra: str) -> None:
        self.what = what
        self.module = module
        self.extra = extra
        super().__init__(
            f"{what} needs the optional '{extra}' dependencies ({module} is not installed): "
            f"pip install 'worldtune[{extra}]'"
        )


def require_extra(what: str, module: str, extra: str) -> None:
    """Raise MissingExtra unless `module` can be imported; checked before anything starts.

    find_spec only looks the module up, so the check costs no import of the heavy package itself.
    """
    import importlib.util

    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a broken half-install
        found = False
    if not found:
        raise MissingExtra(what, module, extra)


def describe(exc: BaseException) -> str:
    """One readable line per problem: pydantic's errors as field=value and the rule, anything else as str().

    The one formatter of validation errors (the CLI and the MCP tools use it): a worldtune refusal raised inside
    a validator is given as it was worded. pydantic's own text ("1 validation error for Workload ... For further
    information visit ...") is written for programmers; a person typing `--steps 0` needs the field, the value
    and what would be valid.
    """
    from pydantic import ValidationError

    if not isinstance(exc, ValidationError):
        return str(exc)
    parts = []
    for error in exc.errors(include_url=False):
        cause = (error.get("ctx") or {}).get("error")
        if isinstance(cause, WorldtuneError):
            parts.append(str(cause))
            continue
        field = ".".join(str(p) for p in error.get("loc", ())) or exc.title
        rule = str(error.get("msg", "invalid")).replace("Input should be", "expected")
        if error.get("type") == "missing":
            parts.append(f"{field} is required")
        elif error.get("type") == "extra_forbidden":
            parts.append(f"{field} is not a known field of {exc.title}")
        else:
            parts.append(f"{field}={shown(error.get('input'))} is not valid: {rule}")
    return "; ".join(parts)


def shown(value: Any, limit: int = 80) -> str:
    """A value as a refusal quotes it: its repr, cut to `limit` characters (a list of 100,000 items is not echoed)."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = f", {len(value):,} items" if isinstance(value, list | tuple | dict | str) else ""
    return f"{text[: limit - 20]}... ({len(text):,} characters{size})"
