"""Offers from the offline snapshot, from SkyPilot-format catalog files, filters and serverless."""

from __future__ import annotations

from pathlib import Path

import pytest

from worldtune.tools.plans.offers import all_offers, cheapest_offer, list_offers
from worldtune.tools.words.errors import InvalidInput


@pytest.fixture(autouse=True)
def _no_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLDTUNE_SKY_CATALOG", str(tmp_path / "empty"))


def test_snapshot_has_the_required_shapes() -> None:
    offers = all_offers()
    ids = {o.id for o in offers}
    assert "nebius/eu-north1/H200:1/on-demand" in ids and "nebius/eu-north1/H200:8/spot" in ids
    assert "nebius/us-central1/B200:8/on-demand" in ids
    assert not [o for o in offers if o.gpu == "B200" and o.infra == "nebius" and o.capacity == "spot"]
    for gpu in ("H200", "B200"):
        assert len({o.infra for o in offers if o.gpu == gpu}) >= 2
    assert all(o.source.startswith("snapshot:") for o in offers)


def test_prices_and_filters() -> None:
    h200 = cheapest_offer("H200", 8)
    assert h200 is not None and h200.usd_per_hour == 28.0
    spot = cheapest_offer("H200", 8, capacity=["spot"])
    assert spot is not None and spot.usd_per_hour == 11.60 and spot.preemptible
    assert cheapest_offer("B200", 8, capacity=["spot"]) is None
    assert all(o.gpu_count == 1 for o in list_offers(gpu="h200", gpus=1))


def test_serverless_is_scale_to_zero_at_the_on_demand_price() -> None:
    serverless = list_offers(gpu="H200", gpus=8, capacity=["serverless"], infra=["nebius"])
    assert serverless and all(o.scale_to_zero and o.usd_per_hour == 28.0 and o.provision_s > 0 for o in serverless)


def test_bad_filters_are_refused() -> None:
    with pytest.raises(InvalidInput, match="capacity"):
        list_offers(capacity=["reserved"])
    with pytest.raises(InvalidInput, match="gpu"):
        list_offers(gpu="Z100")


def test_catalog_files_win_when_present(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    catalog = tmp_path / "v8"
    (catalog / "nebius").mkdir(parents=True)
    (catalog / "nebius" / "vms.csv").write_text(
        "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region,GpuInfo,SpotPrice\n"
        "gpu-h200-sxm_8gpu-128vcpu-1600gb,H200,8,128,1600,27.00,eu-north1,,10.00\n"
        "cpu-d3_4vcpu-16gb,,0,4,16,0.0992,eu-north1,,\n"
    )
    monkeypatch.setenv("WORLDTUNE_SKY_CATALOG", str(catalog))
    offers = all_offers()
    assert {o.usd_per_hour for o in offers if o.capacity == "on-demand"} == {27.0}
    assert all(o.source.startswith("catalog:") for o in offers)
    with pytest.raises(InvalidInput):
        monkeypatch.setenv("WORLDTUNE_SKY_CATALOG", str(tmp_path / "nothing"))
        all_offers("catalog")
