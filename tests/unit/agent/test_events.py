"""What a run says, as words (issue 38 item 4): every kind a sink is told reads back as its word, and the CLI's
printer prints each word's own line (the kinds a person reads), nothing for the others or for what it cannot read."""

from __future__ import annotations

import pytest

from worldtune.agent.events import (
    EVENTS,
    Deploying,
    GoalRead,
    KeptNode,
    Measured,
    Next,
    RunEvent,
    Stopped,
    read_event,
    tell,
)

SAID: list[RunEvent] = [
    GoalRead(goal="p95 under 150 s", run_id="tune-x", assumptions=["a 20,000-clip production"]),
    Next(kind="probe", key="nebius/eu-north1/H200:8/spot|tp8", reason="cheap [probe]", expected_usd=1.234),
    Measured(key="k", kind="full", usd=1.5, model_s=200.0, wall_s=3.0, lanes=2, p50_s=120.1, n=59),
    Deploying(key="k", plan="tp8", gpu="H200", infra="local", lane=True),
    Stopped(reason="converged: test", kind="converged"),
    KeptNode(key="k", deployment="wt-1"),
]


@pytest.mark.parametrize("event", SAID, ids=lambda e: e.event)
def test_what_a_sink_is_told_reads_back_as_the_same_word(event: RunEvent) -> None:
    told: list[tuple[str, dict[str, object]]] = []
    tell(lambda kind, data: told.append((kind, data)), event)
    ((kind, data),) = told
    assert kind == event.event and EVENTS[kind] is type(event) and read_event(kind, data) == event


def test_the_printer_prints_each_words_line_and_nothing_it_cannot_read(capsys: pytest.CaptureFixture[str]) -> None:
    from worldtune.cli_tune import _printer

    show = _printer(as_json=False)
    for event in SAID:
        show(event.event, event.fields())
    show("measured", {"key": "k"})  # fields it cannot read: skipped, never a traceback in the middle of a run
    show("a-kind-of-a-newer-version", {"x": 1})
    err = capsys.readouterr().err
    assert "goal p95 under 150 s" in err and "assumed a 20,000-clip production" in err
    assert "probe nebius/eu-north1/H200:8/spot|tp8: cheap [probe] (~$1.23)" in err  # markup in text escaped
    assert "measured full k: usd 1.5, model_s 200.0, wall_s 3.0, lanes 2, p50_s 120.1, n 59" in err
    assert "deploy key k, plan tp8, gpu H200, infra local, lane True" in err and "stop converged: test" in err
    assert "keep_node" not in err and "wt-1" not in err  # said to the stream, not printed
    assert len(err.strip().splitlines()) == 6
