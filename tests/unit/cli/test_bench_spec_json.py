"""`worldtune bench --spec-json`: how the SkyPilot backend hands a whole BenchmarkSpec to the benchmark job next to
the server (sky/bench_remote.py). A spec that is not one, or an option beside it that would be lost, is refused by
name before anything is measured."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from worldtune.cli_bench_spec import spec_from_json
from worldtune.tools.bench.benchmark import BenchmarkSpec
from worldtune.tools.store.database import Store


def _app() -> Any:
    from worldtune import cli, cli_bench

    app = copy.copy(cli.app)
    app.registered_commands = list(cli.app.registered_commands)
    cli_bench.register(app)
    return app


def test_the_spec_travels_whole_and_the_endpoints_are_the_jobs() -> None:
    sent = BenchmarkSpec(endpoints=["http://10.0.0.7:8000"], steps=4, repeats=5, probe_steps=[], warmup=0,
                         concurrency=[1, 2], label="next to the server")  # fmt: skip
    got = spec_from_json(sent.model_dump_json(), ["http://127.0.0.1:8000/"])
    assert got.endpoints == ["http://127.0.0.1:8000"]
    assert got.model_dump(exclude={"endpoints"}) == sent.model_dump(exclude={"endpoints"})


def test_an_option_beside_the_spec_or_a_bad_spec_is_refused_by_name(tmp_path: Path) -> None:
    db = str(tmp_path / "r.db")
    spec = BenchmarkSpec(endpoints=["http://127.0.0.1:1"], steps=4).model_dump_json()
    beside = CliRunner().invoke(_app(), ["bench", "--endpoint", "http://127.0.0.1:1", "--spec-json", spec,
                                         "--steps", "3", "--db", db])  # fmt: skip
    assert beside.exit_code == 2 and "--steps" in beside.output and "spec_json" in beside.output
    bad = CliRunner().invoke(_app(), ["bench", "--endpoint", "http://127.0.0.1:1", "--spec-json", '{"steps": "a"}',
                                      "--db", db])  # fmt: skip
    assert bad.exit_code == 2 and "steps" in bad.output and "BenchmarkSpec" in bad.output
    assert not Path(db).exists() or Store(db).list_benchmarks() == []  # nothing was measured or recorded
