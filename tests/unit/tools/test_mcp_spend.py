"""Spend quotes and budget guardrails: what a paid action would cost, and the refusals that name the limit."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from worldtune.tools.plans.spend import (
    GUARDRAILS_ENV,
    check_spend,
    load_guardrails,
    needs_confirmation,
    quote,
    run_spent_usd,
)
from worldtune.tools.words.deployment import Deployment
from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.plan import Plan


@pytest.fixture(autouse=True)
def _no_user_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(GUARDRAILS_ENV, raising=False)


def test_defaults_come_from_the_policies_yaml() -> None:
    rails = load_guardrails()
    assert rails.max_usd_per_action > 0 and rails.max_usd_per_run >= rails.max_usd_per_action
    assert "local" in rails.allowed_infras
    assert rails.source.endswith("guardrails.yaml")


def test_override_file_replaces_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    override = tmp_path / "rails.yaml"
    override.write_text("max_usd_per_action: 5\nallowed_infras: [local]\n")
    default_run_limit = load_guardrails().max_usd_per_run
    monkeypatch.setenv(GUARDRAILS_ENV, str(override))
    rails = load_guardrails()
    assert rails.max_usd_per_action == 5 and rails.allowed_infras == ["local"]
    assert rails.max_usd_per_run == default_run_limit  # keys not in the override keep their default
    assert str(override) in rails.source


def test_bad_override_names_the_key(tmp_path: Path) -> None:
    override = tmp_path / "rails.yaml"
    override.write_text("max_usd_per_actoin: 5\n")
    with pytest.raises(InvalidInput, match="max_usd_per_actoin"):
        load_guardrails(override)
    with pytest.raises(InvalidInput, match="existing guardrails YAML"):
        load_guardrails(tmp_path / "missing.yaml")


def test_quote_counts_provisioning_load_and_hours() -> None:
    q = quote("deploy", "H200", Plan.parse("cfg2-u4-hsdp8"), infra="nebius", capacity="spot", hours=2.0)
    assert q.offer is not None and q.offer.infra == "nebius" and q.offer.capacity == "spot"
    assert q.offer.gpu_count >= 8
    assert q.load_s > 0 and q.provision_s > 0
    assert q.expected_hours == pytest.approx(2.0 + (q.provision_s + q.load_s) / 3600)
    assert q.expected_usd == pytest.approx(q.offer.usd_per_hour * q.expected_hours)


def test_local_costs_nothing_and_twin_needs_no_confirmation() -> None:
    q = quote("deploy", "H200", Plan.parse("1gpu"), infra="local")
    assert q.usd_per_hour == 0 and q.expected_usd == 0 and q.offer is None
    assert not needs_confirmation("local", "twin")
    assert needs_confirmation("local", "vllm-omni") and needs_confirmation("nebius", "twin")


def test_quote_refuses_an_infra_without_that_shape() -> None:
    with pytest.raises(InvalidInput, match=r"infra='lambda'.*1xH200"):
        quote("deploy", "H200", Plan.parse("1gpu"), infra="lambda")


def test_check_refuses_naming_field_value_and_limit(tmp_path: Path) -> None:
    rails_file = tmp_path / "rails.yaml"
    rails_file.write_text("max_usd_per_action: 10\nmax_usd_per_run: 40\nallowed_capacities: [spot]\n")
    rails = load_guardrails(rails_file)
    spot = quote("deploy", "H200", Plan.parse("1gpu"), infra="nebius", capacity="spot", hours=1.0)
    check_spend(spot, rails)  # about $1.6: allowed
    with pytest.raises(InvalidInput, match=r"expected_usd=.*max_usd_per_action=10"):
        check_spend(quote("deploy", "H200", Plan.parse("1gpu"), infra="nebius", capacity="spot", hours=7.0), rails)
    with pytest.raises(InvalidInput, match=r"capacity='on-demand'.*allowed_capacities: spot"):
        check_spend(quote("deploy", "H200", Plan.parse("1gpu"), infra="nebius", capacity="on-demand"), rails)
    with pytest.raises(InvalidInput, match=r"run_usd=.*max_usd_per_run=40.*already committed 39"):
        check_spend(spot, rails, spent_usd=39.0)
    with pytest.raises(InvalidInput, match=r"hours=9.*max_hours_per_action"):
        check_spend(quote("deploy", "H200", Plan.parse("1gpu"), infra="nebius", capacity="spot", hours=9.0), rails)


def test_run_spent_adds_price_times_hours_up() -> None:
    now = time.time()
    up = Deployment(gpu="H200", plan="1gpu", usd_per_hour=10.0, created_at=now - 1800)
    gone = Deployment(gpu="H200", plan="1gpu", usd_per_hour=4.0, created_at=now - 7200, terminated_at=now - 3600)
    assert run_spent_usd([up, gone], now=now) == pytest.approx(5.0 + 4.0)
