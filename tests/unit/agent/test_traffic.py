"""Traffic in goals: the arrival shapes and the end-to-end bound are read, checked, and refused with reasons."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from worldtune.agent.goal_parser import GoalQuestion, parse_goal
from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.traffic import Traffic, read_trace

ISSUE_GOAL = (
    "Cosmos3-Super 720p 189 frames, 40 requests/hour, p95 under 10 min including queueing, cheapest per day, "
    "H200, spot ok, budget $400"
)


def test_the_issue_goal_reads_its_traffic() -> None:
    goal = parse_goal(ISSUE_GOAL).goal
    assert goal.traffic is not None
    assert goal.traffic.shape == "poisson" and goal.traffic.rate_per_hour == 40
    assert goal.traffic.e2e_bound_s == 600 and goal.traffic.e2e_percentile == 95
    assert goal.traffic.objective == "min_cost_per_day"
    # one clip must fit the end-to-end bound too: the one-clip search gets it as its bound
    assert goal.latency_bound_s == 600 and goal.capacities == ["on-demand", "spot"] and goal.gpus == ["H200"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("300 clips/day between 8:00 and 20:00, p95 under 15 min end to end, cheapest per day",
         {"shape": "daily_window", "clips_per_day": 300, "window_start_h": 8, "window_end_h": 20, "e2e_bound_s": 900}),
        ("200 videos per day from 9am to 5pm", {"shape": "daily_window", "window_start_h": 9, "window_end_h": 17}),
        ("bursts of 50 every 2 hours, p90 under 30 min including queueing",
         {"shape": "bursts", "burst_size": 50, "burst_every_s": 7200, "e2e_percentile": 90}),
        ("2 requests per minute, end to end p99 under 20 min", {"rate_per_hour": 120, "e2e_percentile": 99}),
    ],
)  # fmt: skip
def test_traffic_phrasings(text: str, expected: dict[str, object]) -> None:
    traffic = parse_goal(text).goal.traffic
    assert traffic is not None
    for key, value in expected.items():
        assert getattr(traffic, key) == value, (text, key)


def test_a_plain_clips_per_day_is_still_a_throughput_floor() -> None:
    goal = parse_goal("at least 240 clips per day, cheapest per clip").goal
    assert goal.traffic is None and goal.throughput_floor_clips_per_hour == 10


@pytest.mark.parametrize(
    ("text", "asks"),
    [
        ("40 requests/hour, p95 under 600 s", "one clip's own latency or end to end"),
        ("p95 under 10 min end to end, cheapest per day", "how do requests arrive"),
        ("300 clips/day between 20:00 and 8:00", "window_end_h=8.0 is not valid"),
        ("300 clips/day between 8:00 and 25:00", "not an hour of the day"),
        ("trace /no/such/arrivals.csv", "trace='/no/such/arrivals.csv' is not valid"),
        ("40 requests/hour, 50 requests/hour", "gives the traffic twice"),
    ],
)
def test_bad_traffic_is_asked_about(text: str, asks: str) -> None:
    with pytest.raises(GoalQuestion) as caught:
        parse_goal(text)
    assert any(asks in q for q in caught.value.questions), caught.value.questions


def test_a_trace_file_is_read_and_its_contents_never_echoed(tmp_path: Path) -> None:
    good = tmp_path / "day.csv"
    good.write_text("arrival_s\n30\n10.5\n7200\n")
    traffic = parse_goal(f"trace {good}, p95 under 20 min including queueing, cheapest per day").goal.traffic
    assert traffic is not None and traffic.trace_s == (10.5, 30.0, 7200.0) and traffic.arrivals() == [10.5, 30, 7200]
    secret = tmp_path / "bad.csv"
    secret.write_text("1\nSECRET-TOKEN-123\n")
    with pytest.raises(InvalidInput) as caught:
        read_trace(str(secret))
    assert "line 2" in str(caught.value) and "SECRET" not in str(caught.value)


@pytest.mark.parametrize(
    ("path", "origin", "says"),
    [
        ("/proc/self/environ", "cli", "regular file"),  # /proc resolves; refused before it is read
        ("/etc/hostname", "cli", "ending in .csv"),
        ("day.csv", "mcp-http", "no trace file over remote MCP"),
        ("/tmp", "cli", "regular file"),
    ],
)
def test_trace_paths_are_checked(path: str, origin: str, says: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        read_trace(path, origin)
    assert says in str(caught.value) or "/proc" in str(caught.value)


def test_mcp_local_reads_traces_only_from_the_trace_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "a.csv").write_text("5\n")
    (tmp_path / "outside.csv").write_text("5\n")
    monkeypatch.setenv("WORLDTUNE_TRACE_DIR", str(folder))
    assert read_trace("a.csv", "mcp-local") == (5.0,)
    with pytest.raises(InvalidInput):
        read_trace(str(tmp_path / "outside.csv"), "mcp-local")


def test_shapes_give_the_arrivals_they_state() -> None:
    poisson = Traffic(shape="poisson", rate_per_hour=40).arrivals(seed=3, horizon_s=86400 * 20)
    assert abs(len(poisson) / 20 / 960 - 1) < 0.03
    assert poisson == Traffic(shape="poisson", rate_per_hour=40).arrivals(seed=3, horizon_s=86400 * 20)
    window = Traffic(shape="daily_window", clips_per_day=300, window_start_h=8, window_end_h=20).arrivals(seed=1)
    assert all(8 * 3600 <= t < 20 * 3600 for t in window) and 250 < len(window) < 350
    bursts = Traffic(shape="bursts", burst_size=50, burst_every_s=7200).arrivals()
    assert len(bursts) == 12 * 50 and bursts[50] == 7200


@pytest.mark.parametrize(
    ("fields", "names"),
    [
        ({"shape": "poisson"}, "rate_per_hour"),
        ({"shape": "bursts", "burst_size": 5}, "burst_every_s"),
        ({"shape": "poisson", "rate_per_hour": -1}, "rate_per_hour"),
        ({"shape": "poisson", "rate_per_hour": 1, "e2e_percentile": 97}, "e2e_percentile"),
        ({"shape": "trace"}, "trace_s"),
    ],
)
def test_bad_traffic_words_name_the_field(fields: dict[str, object], names: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Traffic.model_validate(fields)
    assert names in str(caught.value)
