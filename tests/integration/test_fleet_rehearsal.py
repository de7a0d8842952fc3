"""A planned fleet rehearsed open-loop on local twins: every request answered, measured beside predicted, torn down."""

from __future__ import annotations

from pathlib import Path

import pytest

from worldtune.tools.deployments.fleet_rehearsal import rehearse_fleet
from worldtune.tools.store.database import Store
from worldtune.tools.words.fleet import Autoscaler, Fleet
from worldtune.tools.words.traffic import Traffic
from worldtune.tools.words.workload import anchor_workload

pytestmark = pytest.mark.integration


def test_two_twin_nodes_answer_open_loop_arrivals_and_are_torn_down(tmp_path: Path) -> None:
    store = Store(tmp_path / "wt.db")
    fleet = Fleet(plan="cfg2-u4-vae8-fp8", gpu="H200", offer_id="nebius/eu-north1/H200:8/spot", capacity="spot",
                  service_s=90.8, latency_s=100.4, provision_s=300, load_s=288, usd_per_node_hour=11.6,
                  autoscaler=Autoscaler(policy="fixed", min_replicas=2, max_replicas=2))  # fmt: skip
    traffic = Traffic(shape="poisson", rate_per_hour=40, e2e_bound_s=600)
    result = rehearse_fleet(fleet, traffic, anchor_workload(), 557.0, requests=12, time_scale=300, store=store)
    assert result.nodes == 2 and result.servers == 2 and result.answered == 12
    assert result.measured_p_s is not None and result.measured_p_s > 0 and result.predicted_p_s
    assert result.measured_daily_cost_usd == pytest.approx(2 * 11.6 * 24)
    assert "measured" in result.basis and "predicted" in result.basis
    # the requests that found their server idle give the plan's own latency: never below the model the twin serves
    # (a loaded machine only adds wall time, scaled), and not the busy time between answers (service_s, 90.8 s)
    assert result.measured_latency_mean_s is not None and result.predicted_latency_s == 100.4
    assert result.measured_latency_mean_s >= 0.97 * 100.4
    assert {d.state for d in store.list_deployments()} <= {"terminated"}  # nothing left running
