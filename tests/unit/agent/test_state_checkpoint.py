"""The typed graph state survives a checkpoint: written by one SQLite saver and read back by another (a new
process's resume), every word comes back as itself, with no 'unregistered type' from LangGraph's serializer
(issue 16 item 5). Without the allowlist the same checkpoint does warn: the test can fail."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph")

from langgraph.checkpoint.serde.event_hooks import SerdeEvent, register_serde_event_listener
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Send

from worldtune.agent.checkpoints import sqlite_saver
from worldtune.agent.configuration import TuneOptions
from worldtune.agent.graph import builder
from worldtune.agent.state import (
    CHECKPOINT_SERDE,
    Outcome,
    TuneState,
    VerifyTask,
)
from worldtune.policies.search import Action, Measurement, candidates, decide, initial_state, record
from worldtune.tools.plans.offers import all_offers
from worldtune.tools.words.goal import Goal
from worldtune.tools.words.tuning import SpendEstimate, SpendForecast
from worldtune.tools.words.workload import anchor_workload


def typed_state() -> TuneState:
    """A state as learn leaves it: every field a word, a measurement folded in, a failed action beside it."""
    goal = Goal(workload=anchor_workload(), latency_bound_s=150, capacities=["on-demand", "spot"])
    search = initial_state(goal, all_offers("snapshot"))
    initial = dict(search.beliefs)
    best = candidates(search)[0]
    probe = Measurement(key=best.key, kind="probe", per_step_s=best.per_step_s, fixed_s=best.fixed_s, usd=2.0)
    search = record(search, probe)
    forecast = SpendForecast(usd=3.0, usd_max=9.5, gpu_hours=1.0, answer_hours=0.5, answer_hours_max=1.5,
                             measurements=4.0, runs=20, stops={"converged": 20}, basis="simulated")  # fmt: skip
    estimate = SpendEstimate(parallel=1, usd=12.5, gpu_hours=3.0, answer_hours=1.0, deployments=2, cold_loads=2,
                             warm_loads=1, estimate_basis="modelled", budget_usd=None, candidates=40, feasible=10,
                             first_to_verify=[best.key], engine="twin", infra="local", priced_as="the offers",
                             forecast=forecast)  # fmt: skip
    failed = Measurement(key="other", kind="full", usd=0.5, gpu_hours=0.1)
    return TuneState(
        run_id="tune-typed",
        goal_text="p95 under 150 s, cheapest",
        goal=goal,
        goal_source="parser",
        options=TuneOptions(yes=True, twin_profile=["a.yaml"], budget_usd=40.0),
        search=search,
        initial_beliefs=initial,
        spend_estimate=estimate,
        approved=True,
        decision=decide(search),
        deployments={best.key: "wt-1"},
        results=[
            Outcome(measurement=probe, deployment_id="wt-1", model_s=120.0),
            Outcome(measurement=failed, failed=True, error="deploy failed: no capacity", removed=True),
        ],
        learned=2,
        events=["goal: ...", "next: probe ..."],
    )


@contextmanager
def serde_events() -> Iterator[list[SerdeEvent]]:
    """Every allowlist event LangGraph's serializer raises meanwhile (its log warnings are deduplicated per
    process; the events are not)."""
    seen: list[SerdeEvent] = []
    unregister = register_serde_event_listener(seen.append)
    try:
        yield seen
    finally:
        unregister()


def _write(saver: Any, state: TuneState) -> dict[str, Any]:
    graph = builder.compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": state["run_id"]}}
    graph.update_state(config, dict(state), as_node="learn")
    return dict(config)


def _read(saver: Any, config: dict[str, Any]) -> dict[str, Any]:
    return dict(builder.compile(checkpointer=saver).get_state(config).values)  # type: ignore[arg-type]


def test_the_typed_state_round_trips_through_sqlite_without_unregistered_types(tmp_path: Path) -> None:
    state, path = typed_state(), tmp_path / "checkpoints.sqlite"
    with serde_events() as seen:
        with sqlite_saver(path) as saver:
            config = _write(saver, state)
        with sqlite_saver(path) as saver:  # a new connection and graph, as a resumed run's process opens them
            values = _read(saver, config)
    assert seen == []  # no "Deserializing unregistered type", nothing blocked
    for key, value in state.items():
        assert values[key] == value, key
        assert type(values[key]) is type(value), key
    assert isinstance(values["goal"], Goal) and values["goal"].workload == state["goal"].workload
    assert values["search"].measurements == state["search"].measurements
    assert [type(r) for r in values["results"]] == [Outcome, Outcome] and values["results"][1].failed
    assert values["spend_estimate"].as_json() == state["spend_estimate"].as_json()
    assert "parallel_why" not in values["spend_estimate"].as_json()  # the record's JSON as before: no empty key


def test_a_verify_task_sent_to_a_branch_round_trips() -> None:
    state = typed_state()
    search = state["search"]
    action = Action(key=candidates(search)[0].key, kind="full", expected_usd=5.0, expected_s=100.0,
                       needs_deploy=True, reason="test")  # fmt: skip
    task = VerifyTask(run_id="tune-typed", goal=state["goal"], options=state["options"], action=action,
                      candidate=candidates(search)[0], deployment_id=None, cap_usd=5.0, iteration=1,
                      used_benchmarks=["b1"], billed_deployments=[])  # fmt: skip
    with serde_events() as seen:
        back = CHECKPOINT_SERDE.loads_typed(CHECKPOINT_SERDE.dumps_typed(Send("verify", task)))
    assert seen == [] and isinstance(back, Send) and back.arg == task


def test_without_the_allowlist_the_same_checkpoint_warns(tmp_path: Path) -> None:
    """What the shared serializer prevents: LangGraph's default one revives the words with a warning each."""
    state, path = typed_state(), tmp_path / "checkpoints.sqlite"
    with serde_events() as seen:
        with sqlite_saver(path) as saver:
            config = _write(saver, state)
        with closing(sqlite3.connect(str(path), check_same_thread=False)) as conn:
            _read(SqliteSaver(conn), config)  # the saver as from_conn_string makes it
    unregistered = {(e["module"], e["name"]) for e in seen if e["kind"] == "msgpack_unregistered_allowed"}
    assert ("worldtune.tools.words.goal", "Goal") in unregistered, seen
    assert ("worldtune.agent.state", "Outcome") in unregistered, seen


def test_the_record_json_of_an_outcome_is_the_one_written_before() -> None:
    """The run's record keeps its JSON: a measurement's fields plus deployment and model seconds, or plus why it
    failed."""
    m = Measurement(key="k", kind="full", latencies_s=[1.0], usd=2.0, benchmark_id="b")
    assert Outcome(measurement=m, deployment_id="wt-1", model_s=3.0).as_json() == {
        **m.model_dump(mode="json"), "deployment_id": "wt-1", "model_s": 3.0,
    }  # fmt: skip
    assert Outcome(measurement=m, failed=True, error="why").as_json() == {
        **m.model_dump(mode="json"), "failed": True, "error": "why", "removed": False,
    }  # fmt: skip


def test_resuming_a_checkpoint_of_plain_json_is_refused_clearly(tmp_path: Path) -> None:
    """A run checkpointed before the state carried the words (its values plain JSON) is refused by name, not
    with a traceback from deep in a node."""
    from worldtune.agent.runner import checkpointed_options
    from worldtune.tools.words.errors import InvalidInput

    db = tmp_path / "wt.db"
    state = typed_state()
    old: Any = {"run_id": "tune-old", "goal": state["goal"].model_dump(mode="json"),
                "options": state["options"].model_dump(mode="json")}  # fmt: skip
    with sqlite_saver(TuneOptions(db_path=str(db)).checkpoint_path()) as saver:
        _write(saver, old)
    with pytest.raises(InvalidInput, match="predates the typed state"):
        checkpointed_options("tune-old", str(db))
    with sqlite_saver(TuneOptions(db_path=str(db)).checkpoint_path()) as saver:
        _write(saver, typed_state())
    assert checkpointed_options("tune-typed", str(db)).budget_usd == 40.0
