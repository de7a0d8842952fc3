"""The fleet's queueing model against closed forms (M/D/1, M/M/c Erlang C), and its autoscaler, cold starts and spot."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from worldtune.policies.fleet_sim import simulate_day
from worldtune.tools.words.fleet import Autoscaler, Fleet
from worldtune.tools.words.traffic import Traffic

DAYS = 30
HORIZON = 86400.0 * DAYS


def _erlang_c_wait(servers: int, service_s: float, rate_per_s: float) -> float:
    a = rate_per_s * service_s
    below = sum(a**k / math.factorial(k) for k in range(servers))
    top = a**servers / math.factorial(servers) * servers / (servers - a)
    return top / (below + top) / (servers / service_s - rate_per_s)


def _poisson(rate_per_hour: float, seed: int = 1) -> list[float]:
    return Traffic(shape="poisson", rate_per_hour=rate_per_hour).arrivals(seed=seed, horizon_s=HORIZON)


def test_one_server_with_fixed_service_waits_as_m_d_1() -> None:
    service, rate = 70.0, 36 / 3600  # rho 0.7
    day = simulate_day(Fleet(service_s=service, usd_per_node_hour=1.0), _poisson(36), seed=1, horizon_s=HORIZON)
    rho = rate * service
    closed = rho * service / (2 * (1 - rho))  # Pollaczek-Khinchine with deterministic service
    assert day.arrivals > 20000 and day.completed == day.arrivals
    assert day.wait_mean_s == pytest.approx(closed, rel=0.06)


def test_a_shared_fifo_of_exponential_servers_waits_as_erlang_c() -> None:
    servers, service, rate = 3, 210.0, 36 / 3600  # rho 0.7
    fleet = Fleet(service_s=service, servers_per_node=servers, service_distribution="exponential",
                  dispatch="central", usd_per_node_hour=1.0)  # fmt: skip
    day = simulate_day(fleet, _poisson(36), seed=2, horizon_s=HORIZON)
    assert day.wait_mean_s == pytest.approx(_erlang_c_wait(servers, service, rate), rel=0.10)


def test_least_loaded_per_server_fifo_sits_between_a_shared_queue_and_a_random_split() -> None:
    servers, service, rate = 3, 210.0, 36 / 3600
    fleet = Fleet(service_s=service, servers_per_node=servers, service_distribution="exponential",
                  usd_per_node_hour=1.0)  # fmt: skip
    day = simulate_day(fleet, _poisson(36), seed=2, horizon_s=HORIZON)
    rho = rate * service / servers
    assert _erlang_c_wait(servers, service, rate) < day.wait_mean_s < rho * service / (1 - rho)  # M/M/1 at rate/c


def test_the_same_seed_gives_the_same_day_and_another_seed_another() -> None:
    auto = Autoscaler(policy="queue", min_replicas=0, max_replicas=3, target_queue_per_server=1)
    fleet = Fleet(service_s=300.0, service_cv=0.1, servers_per_node=2, usd_per_node_hour=10.0, autoscaler=auto)
    arrivals = Traffic(shape="poisson", rate_per_hour=20).arrivals(seed=5)
    one, two = simulate_day(fleet, arrivals, seed=7), simulate_day(fleet, arrivals, seed=7)
    assert one == two
    assert simulate_day(fleet, arrivals, seed=8).e2e_s != one.e2e_s


def test_scale_to_zero_pays_cold_starts_and_bills_only_the_busy_hours() -> None:
    window = Traffic(shape="daily_window", clips_per_day=100, window_start_h=8, window_end_h=12).arrivals(seed=0)
    auto = Autoscaler(policy="queue", min_replicas=0, max_replicas=4, target_queue_per_server=1,
                      upscale_delay_s=20, downscale_delay_s=1200)  # fmt: skip
    fleet = Fleet(service_s=300.0, provision_s=300.0, load_s=290.0, usd_per_node_hour=10.0, autoscaler=auto)
    day = simulate_day(fleet, window, seed=0)
    assert day.completed == day.arrivals
    assert day.cold_starts >= 1 and day.waited_on_cold_start >= 1
    assert day.percentile(99) >= 590  # the first request of the morning waits for provisioning + load
    assert 0 < day.node_hours < 16  # nothing billed at night
    assert day.timeline[0].nodes == 0 and max(s.nodes for s in day.timeline) == day.max_nodes > 1


def test_skyserve_qps_rule_follows_the_rate_after_its_upscale_delay() -> None:
    busy = Traffic(shape="poisson", rate_per_hour=3600).arrivals(seed=1, horizon_s=7200)  # 1 req/s for 2 h
    auto = Autoscaler(policy="qps", min_replicas=1, max_replicas=8, target_qps_per_replica=0.25)
    fleet = Fleet(service_s=3.0, provision_s=60, usd_per_node_hour=1.0, autoscaler=auto)
    day = simulate_day(fleet, busy, seed=1, horizon_s=7200)
    assert 4 <= day.max_nodes <= 8 and day.cold_starts >= 3
    first_up = next(s.t_s for s in day.timeline if s.nodes > 1)
    assert first_up >= auto.upscale_delay_s


def test_spot_preemptions_requeue_requests_and_the_fallback_stays_on_demand() -> None:
    arrivals = Traffic(shape="poisson", rate_per_hour=20).arrivals(seed=2)
    fleet = Fleet(service_s=300.0, capacity="spot", usd_per_node_hour=4.0, ondemand_usd_per_node_hour=10.0,
                  preemptions_per_node_hour=0.5, base_ondemand_fallback=1, provision_s=300, load_s=290,
                  autoscaler=Autoscaler(policy="fixed", min_replicas=3, max_replicas=3))  # fmt: skip
    day = simulate_day(fleet, arrivals, seed=2)
    assert day.preemptions > 5 and day.cold_starts == day.preemptions
    assert day.completed == day.arrivals  # every preempted request was served again
    assert day.ondemand_node_hours == pytest.approx(24, abs=0.5)  # the one fallback node is never preempted
    assert day.cost_usd == pytest.approx(day.ondemand_node_hours * 10 + (day.node_hours - day.ondemand_node_hours) * 4)


@pytest.mark.parametrize(
    ("fields", "names"),
    [
        ({"policy": "fixed", "min_replicas": 1, "max_replicas": 2}, "max_replicas"),
        ({"policy": "qps", "min_replicas": 0, "max_replicas": 2}, "target_qps_per_replica"),
        ({"policy": "queue", "min_replicas": 3, "max_replicas": 2, "target_queue_per_server": 1}, "max_replicas"),
    ],
)
def test_bad_autoscalers_name_the_field(fields: dict[str, object], names: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Autoscaler.model_validate(fields)
    assert names in str(caught.value)


def test_on_demand_nodes_are_not_preempted() -> None:
    with pytest.raises(ValidationError, match="preemptions_per_node_hour"):
        Fleet(service_s=1.0, usd_per_node_hour=1.0, preemptions_per_node_hour=0.1)
