"""plan_capacity: the cheapest simulated fleet under the end-to-end bound, as a function and as an MCP tool."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from worldtune.tools.capacity import plan_capacity
from worldtune.tools.errors import InvalidInput
from worldtune.tools.goal import Goal
from worldtune.tools.mcp_server import build_server
from worldtune.tools.traffic import Traffic

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

    monkeypatch.setattr(fleet_step, "plan_capacity", lambda goal: planned)
    seen: list[str] = []
    goal = Goal(gpus=["H200"], traffic=TRAFFIC)
    out = fleet_step.fleet_for(goal, "nebius", "vllm-omni", 1.0, None, lambda kind, data: seen.append(data["note"]))
    assert out is not None and out["rehearsal"] is None and "local twins only" in out["note"]
    assert "replica_policy:" in out["skyserve_service_yaml"] and seen
    lines = fleet_step.fleet_lines(out)
    assert lines[0].startswith("fleet: ") and "predicted (simulated): p95" in lines[1] and "/day" in lines[1]
    assert fleet_step.fleet_for(Goal(), "local", "twin", 300.0, None, lambda k, d: None) is None
