"""plan_capacity: the cheapest simulated fleet under the end-to-end bound, as a function and as an MCP tool."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from worldtune.policies.calibration import shipped_profile
from worldtune.tools.deployments.capacity import plan_capacity
from worldtune.tools.deployments.fleet_rehearsal import FleetOutcome
from worldtune.tools.mcp.server import build_server
from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.goal import Goal
from worldtune.tools.words.profile import Profile
from worldtune.tools.words.traffic import Traffic

TRAFFIC = Traffic(shape="poisson", rate_per_hour=40, e2e_bound_s=600, e2e_percentile=95)


@pytest.fixture(scope="module")
def planned() -> Any:
    return plan_capacity(Goal(gpus=["H200"], capacities=["on-demand"], traffic=TRAFFIC))


def test_the_chosen_fleet_meets_the_bound_and_is_the_cheapest_that_does(planned: Any) -> None:
    chosen = planned.chosen
    assert chosen is not None and chosen.meets
    assert chosen.p_e2e_s <= 600 and chosen.p_e2e_pessimistic_s is not None and chosen.p_e2e_pessimistic_s <= 600
    assert chosen.day.completed == chosen.day.arrivals and chosen.day.timeline  # the day kept for the plot
    assert all(r.daily_cost_usd >= chosen.daily_cost_usd * 0.98 for r in planned.runners_up)  # seeds may reorder ties
    # the load it carries needs at least this many servers: the queue would grow without bound below it
    servers = chosen.fleet.servers_per_node * chosen.fleet.autoscaler.max_replicas
    assert servers * 3600 / chosen.fleet.service_s > 40
    assert "simulated" in planned.basis and any("assumed" in a for a in planned.assumptions)


def test_skyserve_defaults_are_simulated_beside_it(planned: Any) -> None:
    sky = planned.skyserve_default
    assert sky is not None and sky.fleet.autoscaler.policy == "qps" and sky.fleet.autoscaler.upscale_delay_s == 300
    assert sky.fleet.plan == planned.chosen.fleet.plan


def test_a_bound_no_clip_can_meet_is_refused() -> None:
    tight = TRAFFIC.model_copy(update={"e2e_bound_s": 5.0})
    with pytest.raises(InvalidInput, match="one clip must fit the bound"):
        plan_capacity(Goal(gpus=["H200"], traffic=tight))
    with pytest.raises(InvalidInput, match="traffic"):
        plan_capacity(Goal(gpus=["H200"]))


def _call(tmp_path: Path, tool: str, args: dict[str, Any], origin: str = "mcp-local") -> tuple[bool, str]:
    async def main() -> tuple[bool, str]:
        async with Client(build_server(str(tmp_path / "wt.db"), origin=origin)) as client:
            result = await client.call_tool(tool, args)
            text = "".join(getattr(c, "text", "") for c in result.content)
            return bool(result.is_error), text

    return anyio.run(main)


def test_mcp_plan_capacity_refuses_bad_traffic_naming_the_field(tmp_path: Path) -> None:
    error, text = _call(tmp_path, "plan_capacity", {"shape": "poisson", "rate_per_hour": -3})
    assert error and "rate_per_hour" in text
    error, text = _call(tmp_path, "plan_capacity", {"shape": "bursts", "burst_size": 5})
    assert error and "burst_every_s" in text
    error, text = _call(tmp_path, "plan_capacity", {"shape": "trace", "trace": "/etc/x.csv"}, origin="mcp-http")
    assert error and "no trace file over remote MCP" in text
    error, text = _call(tmp_path, "plan_capacity", {"shape": "poisson", "rate_per_hour": 4, "e2e_percentile": 97})
    assert error and "e2e_percentile" in text


def test_mcp_plan_capacity_answers_a_fleet(tmp_path: Path) -> None:
    traffic = {"shape": "daily_window", "clips_per_day": 60, "window_start_h": 9, "window_end_h": 17,
               "e2e_bound_s": 1800, "e2e_percentile": 90}  # fmt: skip
    error, text = _call(tmp_path, "plan_capacity", traffic)
    assert not error, text
    result = json.loads(text)
    assert result["chosen"]["meets"] and result["chosen"]["p_e2e_s"] <= 1800
    assert "simulated" in result["basis"]


def test_start_tuning_refuses_a_trace_a_remote_client_names(tmp_path: Path) -> None:
    from worldtune.agent.tuner import AgentTuner

    async def main() -> tuple[bool, str]:
        async with Client(build_server(str(tmp_path / "wt.db"), tuner=AgentTuner(), origin="mcp-http")) as client:
            result = await client.call_tool("start_tuning", {"goal": "trace /tmp/x.csv, cheapest per day"})
            return bool(result.is_error), "".join(getattr(c, "text", "") for c in result.content)

    error, text = anyio.run(main)
    assert error and "goal trace='/tmp/x.csv'" in text and "remote MCP" in text


def test_the_tune_step_prints_the_fleet_and_writes_its_service(planned: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from worldtune.agent import fleet_step

    monkeypatch.setattr(fleet_step, "plan_capacity", lambda goal, **kwargs: planned)
    seen: list[str] = []
    goal = Goal(gpus=["H200"], traffic=TRAFFIC)
    out = fleet_step.fleet_for(goal, "nebius", "vllm-omni", 1.0, None, lambda kind, data: seen.append(data["note"]))
    assert out is not None and out.rehearsal is None and out.note and "local twins only" in out.note
    assert out.skyserve_service_yaml and "replica_policy:" in out.skyserve_service_yaml and seen
    kept = out.model_dump(mode="json")  # as the record keeps it: a key once it says something, the rehearsal null
    assert kept["rehearsal"] is None and "replanned" not in kept and "differs" not in kept
    assert FleetOutcome.model_validate(kept).model_dump(mode="json") == kept  # and reads back as the same
    lines = fleet_step.fleet_lines(out)
    assert lines[0].startswith("fleet: ") and "predicted (simulated): p95" in lines[1] and "/day" in lines[1]
    assert fleet_step.fleet_for(Goal(), "local", "twin", 300.0, None, lambda k, d: None) is None


# ---- the rehearsal fed back, and the report's simulated day ----------------------------------------------------
def test_a_measured_latency_rescales_that_plan_and_only_that_plan(planned: Any) -> None:
    chosen = planned.chosen.fleet
    slower = {(chosen.gpu, chosen.plan): chosen.latency_s * 1.5}
    again = plan_capacity(Goal(gpus=["H200"], capacities=["on-demand"], traffic=TRAFFIC), measured_latency_s=slower)
    assert again.chosen is not None and again.chosen.meets
    assert any(chosen.plan in a and "measured" in a for a in again.assumptions)
    if again.chosen.fleet.plan == chosen.plan:  # kept: at the measured speed, so at least as many servers
        assert again.chosen.fleet.service_s == pytest.approx(chosen.service_s * 1.5)
        assert again.chosen.fleet.latency_s == pytest.approx(chosen.latency_s * 1.5)
    assert again.chosen.daily_cost_usd >= planned.chosen.daily_cost_usd * 0.98  # a slower plan buys nothing cheaper


def _rehearsal(measured: float | None, sem: float | None, predicted: float = 100.0) -> Any:
    from worldtune.tools.deployments.fleet_rehearsal import FleetRehearsal

    return FleetRehearsal(nodes=1, servers=1, requests=10, answered=10, time_scale=300, percentile=95,
                          measured_p_s=200.0, predicted_p_s=190.0, measured_wait_mean_s=12.0,
                          predicted_wait_mean_s=10.0, measured_latency_mean_s=measured,
                          measured_latency_sem_s=sem, predicted_latency_s=predicted, measured_daily_cost_usd=278.4,
                          predicted_daily_cost_usd=278.4, meets=True)  # fmt: skip


def test_a_rehearsal_disagrees_only_past_the_tolerance_and_its_noise() -> None:
    assert not _rehearsal(102.0, 0.5).latency_disagrees()  # 2% off: within the tolerance
    assert _rehearsal(110.0, 1.0).latency_disagrees()  # 10% off, well past two standard errors
    assert not _rehearsal(110.0, 8.0).latency_disagrees()  # 10% off but within its own noise
    assert not _rehearsal(None, None).latency_disagrees()  # nothing measured on an idle server: nothing to feed


def test_the_fleet_step_feeds_a_disagreeing_rehearsal_back_and_tries_each_twin_profile(
    planned: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The rehearsal goes through the MCP tool rehearse_fleet (in-process), which tries each twin profile."""
    from worldtune.agent import fleet_step
    from worldtune.tools.deployments import fleet_rehearsal

    calls: list[Any] = []

    def plan(goal: Goal, measured_latency_s: Any = None, profile_paths: Any = None) -> Any:
        calls.append(measured_latency_s)
        learned.append(Profile.load(profile_paths["H200"]).attn_tflops)  # the run's learned profile, written out
        return planned

    learned: list[float] = []

    tried: list[str | None] = []

    def rehearse(*args: Any, twin_profile: str | None = None, **kwargs: Any) -> Any:
        tried.append(None if twin_profile is None else Path(twin_profile).name)
        if twin_profile is not None and Path(twin_profile).name == "b200.yaml":
            raise InvalidInput("twin_profile", twin_profile, "a profile for H200", "it is for B200")
        return _rehearsal(planned.chosen.fleet.latency_s * 1.2, 0.5, planned.chosen.fleet.latency_s)

    monkeypatch.setattr(fleet_step, "plan_capacity", plan)
    monkeypatch.setattr(fleet_rehearsal, "rehearse_fleet", rehearse)
    notes: list[str] = []
    goal = Goal(gpus=["H200"], traffic=TRAFFIC)
    profiles = [str(tmp_path / "b200.yaml"), str(tmp_path / "h200.yaml")]  # files: the tool checks each path
    for path in profiles:
        shipped_profile("H200").dump(path)
    taught = {"H200": shipped_profile("H200").with_changes(attn_tflops=500.0).model_dump(mode="json")}
    db = str(tmp_path / "wt.db")
    out = fleet_step.fleet_for(goal, "local", "twin", 300.0, db, lambda k, d: notes.append(d["note"]), profiles,
                               learned_profiles=taught)  # fmt: skip
    assert learned == [500.0, 500.0] and "recalibrated H200" in notes[0]
    assert out is not None and tried == ["b200.yaml", "h200.yaml"]
    key = (planned.chosen.fleet.gpu, planned.chosen.fleet.plan)
    assert calls == [None, {key: pytest.approx(planned.chosen.fleet.latency_s * 1.2)}]
    assert out.replanned is not None and out.replanned.same_fleet and "re-planning" in notes[-1]
    assert any(
        "re-planned with the measured latency: the same fleet still meets" in line
        for line in fleet_step.fleet_lines(out)
    )


def test_rehearse_fleet_refuses_a_goal_without_traffic_a_bad_fleet_and_an_unreadable_profile(
    planned: Any, tmp_path: Path
) -> None:
    from mcp_cases import refused

    from worldtune.tools.mcp.server import build_server

    fleet = planned.chosen.fleet.model_dump(mode="json")
    goal = Goal(gpus=["H200"], traffic=TRAFFIC).model_dump(mode="json")

    async def main() -> None:
        async with Client(build_server(str(tmp_path / "wt.db"))) as client:
            base = {"goal": goal, "fleet": fleet, "predicted_daily_cost_usd": 10.0}
            no_traffic = Goal(gpus=["H200"]).model_dump(mode="json")
            await refused(client, "rehearse_fleet", base | {"goal": no_traffic}, "goal", "traffic")
            await refused(client, "rehearse_fleet", base | {"fleet": {"plan": "tp8"}}, "fleet=", "Fleet")
            missing = str(tmp_path / "none.yaml")
            await refused(client, "rehearse_fleet", base | {"twin_profiles": [missing]}, "twin_profiles=", missing)

    anyio.run(main)


def test_the_report_draws_the_chosen_fleets_simulated_day(planned: Any, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from worldtune.agent.report_fleet import fleet_html, fleet_of, write_fleet_day
    from worldtune.tools.words.run_summary import RecordedGoal, RunSummary, Spend

    counts = dict.fromkeys(("gpu_hours", "usd", "deployments", "replans", "benchmarks", "model_seconds"), 0)
    spend = Spend(**counts, budget_usd=None, answer_hours=0, lanes=0, full_requests=0, confidence=0.95,
                  answer_basis="-", priced_as="-")  # fmt: skip
    without = RunSummary(run_id="tune-f", thread_id="tune-f", goal=RecordedGoal(traffic=TRAFFIC), spend=spend)
    fleet = FleetOutcome(capacity=planned, note="not rehearsed").model_dump(mode="json")
    record = without.model_copy(update={"fleet": fleet})
    day = planned.chosen.day
    assert len(day.answers) == day.arrivals and all(e > 0 for _, e in day.answers)
    kept = fleet_of(record)  # the record's fleet read back as words
    assert write_fleet_day(kept, tmp_path / "day.png") and (tmp_path / "day.png").stat().st_size > 10_000
    assert "Fleet for the goal" in fleet_html(kept) and "predicted (simulated)" in fleet_html(kept)
    assert fleet_of(without) is None
    assert not write_fleet_day(None, tmp_path / "none.png") and not (tmp_path / "none.png").exists()
    assert fleet_html(None) == ""


def test_a_learned_profile_sets_the_fleets_service_times(planned: Any, tmp_path: Path) -> None:
    from worldtune.tools.plans.estimate import estimate_plan
    from worldtune.tools.words.plan import Plan

    slow = shipped_profile("H200").with_changes(attn_tflops=shipped_profile("H200").attn_tflops * 0.7)
    path = tmp_path / "H200-learned.yaml"
    slow.dump(path)
    goal = Goal(gpus=["H200"], capacities=["on-demand"], traffic=TRAFFIC)
    taught = plan_capacity(goal, profile_paths={"H200": str(path)})
    assert taught.chosen is not None and any(str(path) in a for a in taught.assumptions)
    fleet = taught.chosen.fleet
    assert fleet.latency_s == pytest.approx(
        estimate_plan(goal.workload, "H200", Plan.parse(fleet.plan), slow).latency_s
    )
    assert taught.chosen.daily_cost_usd >= planned.chosen.daily_cost_usd * 0.98  # slower GPUs buy nothing cheaper
