"""Property-based test of the MCP tools (hypothesis): random calls never start or stop anything unconfirmed,
never commit more than the caps, never leak a planted file's contents, and every refusal is clear.

The properties and the draws live in tests/mcp_fuzz_cases.py (benchmarks/mcp_fuzz.py runs the same with
more examples and saves the counts). Bounded: max_examples and short call sequences keep it near a minute.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import fake_cloud
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp_fuzz_cases import Tally, call_strategy, plant_secrets, run_calls

from worldtune.tools.backends import registry as backend_registry
from worldtune.tools.plans.spend import GUARDRAILS_ENV

SECRETS = plant_secrets(Path(tempfile.mkdtemp(prefix="wt-fuzz-secrets-")))


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(GUARDRAILS_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("WORLDTUNE_PROFILE_DIR", str(tmp_path / "profiles"))
    monkeypatch.setattr(backend_registry, "SKY_BACKEND", fake_cloud.SEAM)  # SkyPilot and Kubernetes cannot run here
    monkeypatch.setattr(backend_registry, "K8S_BACKEND", fake_cloud.SEAM)


@settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(calls=st.lists(call_strategy(SECRETS), min_size=1, max_size=8))
def test_random_tool_calls_keep_every_promise(calls: list[tuple[str, dict[str, object]]]) -> None:  # fmt: skip
    tally = Tally()
    with tempfile.TemporaryDirectory(prefix="wt-fuzz-") as folder:
        run_calls(calls, Path(folder) / "wt.db", tally)
    assert tally.calls == len(calls)
    assert tally.broken == [], tally.broken


def test_the_properties_can_fail() -> None:
    # the checks themselves: an answer holding the marker, and a refusal that says nothing, are both caught
    from mcp_fuzz_cases import OURS, PYDANTIC, SECRET

    assert not OURS.search("Error executing tool estimate") and not PYDANTIC.search("Error executing tool estimate")
    assert OURS.search("profile='/x' is not valid: a profile name")
    assert SECRET in Path(SECRETS[0]).read_text()
