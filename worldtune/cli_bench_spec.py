"""`worldtune bench --spec-json`: a whole BenchmarkSpec as JSON, what worldtune's SkyPilot backend sends to the
benchmark job next to the server (sky/bench_remote.py); --endpoint replaces its endpoints, nothing else may be given.
"""

from __future__ import annotations

from typing import Any

import typer

SPEC_COMPANIONS = {"endpoint", "spec_json", "db", "as_json", "wait"}  # what may be given beside --spec-json


def only_endpoints_with_spec(ctx: typer.Context) -> None:
    """--spec-json carries the whole request: a workload or load option beside it would be silently lost."""
    from worldtune.tools.words.errors import InvalidInput

    given = sorted(
        name
        for name in ctx.params
        if name not in SPEC_COMPANIONS and getattr(ctx.get_parameter_source(name), "name", "") == "COMMANDLINE"
    )
    if given:
        raise InvalidInput(
            "spec_json",
            "(given)",
            "--spec-json with only --endpoint, --db, --json, --wait",
            f"also given: {', '.join('--' + g.replace('_', '-') for g in given)}",
        )


def spec_from_json(text: str, endpoints: list[str]) -> Any:
    from pydantic import ValidationError

    from worldtune.tools.bench.benchmark import BenchmarkSpec
    from worldtune.tools.words.errors import InvalidInput, describe

    try:
        spec = BenchmarkSpec.model_validate_json(text)
    except ValidationError as exc:
        raise InvalidInput("spec_json", "(given)", "a BenchmarkSpec as JSON", describe(exc)) from exc
    return spec.model_copy(update={"endpoints": BenchmarkSpec(endpoints=endpoints).endpoints})
