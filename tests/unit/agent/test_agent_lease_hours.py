"""The hours the agent asks for cover the action it is about to run (on SkyPilot they are the hard autodown)."""

from __future__ import annotations

import math

from worldtune.agent.configuration import TuneOptions
from worldtune.agent.verify import lease_hours
from worldtune.policies.search import Action


def _action(expected_s: float) -> Action:
    return Action(key="o|tp8", kind="full", expected_usd=1.0, expected_s=expected_s, needs_deploy=True, reason="")


def test_a_long_full_run_is_asked_for_long_enough_and_no_longer_than_its_share() -> None:
    real = TuneOptions(engine="vllm-omni", infra="nebius", yes=True)
    # 3 modelled hours of measuring: 4.5 h asked, not the 0.25 h default that would down the node mid-run
    assert lease_hours(_action(3 * 3600), real, math.inf) == 4.5
    assert lease_hours(_action(3 * 3600), real, 4 * 3600) == 4.0  # at most its share of the budget
    assert lease_hours(_action(60), real, math.inf) == real.hold_hours  # short actions: the floor
    assert lease_hours(_action(60), real, 10.0) == real.hold_hours  # the floor even past a tiny share


def test_the_twins_lease_is_wall_time() -> None:
    twin = TuneOptions(time_scale=300.0, yes=True)
    assert twin.twin and lease_hours(_action(3 * 3600), twin, math.inf) == twin.hold_hours  # 36 wall-s < 15 min
    assert lease_hours(_action(1000 * 3600), twin, math.inf) == round(1.5 * 1000 / 300, 4)
