"""Offers: GPU shapes for rent, from SkyPilot's catalog files when present, else a dated snapshot.

Prices change, so the catalog (SkyPilot's `~/.sky/catalogs/v8/<cloud>/vms.csv`) wins when it is on
this machine; the snapshot shipped in tools/data keeps everything working offline. Serverless is
modelled as scale-to-zero capacity on an on-demand shape (SkyServe `min_replicas: 0`): no charge
while idle, and a first request that pays provisioning plus model load.
"""

from __future__ import annotations

import csv
import functools
import json
import os
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from worldtune.tools.words.errors import InvalidInput, one_of
from worldtune.tools.words.gpus import GPUS, get_gpu
from worldtune.tools.words.offer import CAPACITIES, Offer

SNAPSHOT_FILE = Path(__file__).parents[1] / "data" / "offers-snapshot.json"
CATALOG_CLOUDS = ("nebius", "aws", "lambda", "gcp", "runpod", "primeintellect", "shadeform", "vast", "oci")
# Typical minutes from `sky launch` to a node that runs commands, per infra (assumed, conservative).
PROVISION_S = {"nebius": 300.0, "aws": 420.0, "lambda": 360.0, "kubernetes": 120.0, "local": 0.0}


def catalog_dir() -> Path:
    """Where SkyPilot's catalog files are read from (WORLDTUNE_SKY_CATALOG overrides)."""
    override = os.environ.get("WORLDTUNE_SKY_CATALOG")
    return Path(override) if override else Path.home() / ".sky" / "catalogs" / "v8"


def _expand(row: dict[str, Any], source: str, as_of: str) -> list[Offer]:
    """One catalog row -> on-demand, spot (where priced) and serverless offers."""
    infra = str(row["infra"])
    common = {
        "infra": infra,
        "region": str(row.get("region", "")),
        "instance_type": str(row.get("instance_type", "")),
        "gpu": str(row["gpu"]),
        "gpu_count": int(row["gpu_count"]),
        "source": source,
        "as_of": as_of,
        "provision_s": PROVISION_S.get(infra, 300.0),
    }
    price = float(row["usd_per_hour"])
    offers = [
        Offer(capacity="on-demand", usd_per_hour=price, **common),
        Offer(capacity="serverless", usd_per_hour=price, scale_to_zero=True, **common),
    ]
    spot = row.get("spot_usd_per_hour")
    if spot not in (None, ""):
        offers.append(Offer(capacity="spot", usd_per_hour=float(spot), preemptible=True, **common))
    return offers


def _snapshot_rows() -> tuple[list[dict[str, Any]], str]:
    data = json.loads(SNAPSHOT_FILE.read_text())
    return list(data["offers"]), str(data["as_of"])


def _catalog_rows(directory: Path) -> list[dict[str, Any]]:
    """Rows for the GPUs worldtune knows from SkyPilot catalog vms.csv files."""
    rows: list[dict[str, Any]] = []
    for cloud in CATALOG_CLOUDS:
        path = directory / cloud / "vms.csv"
        if not path.is_file():
            continue
        with path.open(newline="") as handle:
            for rec in csv.DictReader(handle):
                gpu = (rec.get("AcceleratorName") or "").strip()
                if gpu not in GPUS or not rec.get("Price"):
                    continue
                rows.append(
                    {
                        "infra": cloud,
                        "region": rec.get("Region", ""),
                        "instance_type": rec.get("InstanceType", ""),
                        "gpu": gpu,
                        "gpu_count": int(float(rec.get("AcceleratorCount") or 0)),
                        "usd_per_hour": float(rec["Price"]),
                        "spot_usd_per_hour": rec.get("SpotPrice") or None,
                    }
                )
    return rows


def _catalog_stamp(directory: Path) -> tuple[float, ...]:
    return tuple(
        (directory / cloud / "vms.csv").stat().st_mtime if (directory / cloud / "vms.csv").is_file() else 0.0
        for cloud in CATALOG_CLOUDS
    )


def all_offers(source: str = "auto") -> list[Offer]:
    """Every offer: from the catalog ('catalog'), the snapshot ('snapshot') or the catalog if present."""
    if source not in ("auto", "catalog", "snapshot"):
        raise one_of("source", source, ("auto", "catalog", "snapshot"))
    directory = catalog_dir()
    return list(_all_offers(source, directory, _catalog_stamp(directory)))


@functools.lru_cache(maxsize=8)
def _all_offers(source: str, directory: Path, stamp: tuple[float, ...]) -> tuple[Offer, ...]:
    offers: list[Offer] = []
    if source in ("auto", "catalog"):
        rows = _catalog_rows(directory)
        if source == "catalog" and not rows:
            raise InvalidInput("source", source, f"SkyPilot catalog files under {directory}", "use snapshot")
        for row in rows:
            mtime = (directory / row["infra"] / "vms.csv").stat().st_mtime
            as_of = datetime.fromtimestamp(mtime, tz=UTC).date().isoformat()
            offers.extend(_expand(row, f"catalog:{directory}", as_of))
    if not offers:
        rows, as_of = _snapshot_rows()
        for row in rows:
            offers.extend(_expand(row, f"snapshot:{as_of}", as_of))
    return tuple(sorted(offers, key=lambda o: (o.gpu, o.gpu_count, o.usd_per_hour, o.infra, o.region)))


def list_offers(
    gpu: str | None = None,
    gpus: int | None = None,
    infra: Iterable[str] | None = None,
    capacity: Iterable[str] | None = None,
    source: str = "auto",
) -> list[Offer]:
    """Offers filtered by GPU type, exact GPU count, infra (CLOUD or CLOUD/REGION) and capacity, cheapest first."""
    gpu_name = get_gpu(gpu).name if gpu else None
    capacities = list(capacity or [])
    for cap in capacities:
        if cap not in CAPACITIES:
            raise one_of("capacity", cap, CAPACITIES)
    # "nebius/eu-north1" names a cloud and one of its regions; "nebius" any of its regions
    infras = [i.lower().partition("/")[::2] for i in (infra or [])]
    chosen = [
        o
        for o in all_offers(source)
        if (gpu_name is None or o.gpu == gpu_name)
        and (gpus is None or o.gpu_count == gpus)
        and (not infras or any(o.infra == name and region in ("", o.region) for name, region in infras))
        and (not capacities or o.capacity in capacities)
    ]
    return sorted(chosen, key=lambda o: o.usd_per_hour)


def cheapest_offer(
    gpu: str, gpus: int, capacity: Iterable[str] = ("on-demand",), infra: Iterable[str] | None = None
) -> Offer | None:
    """The cheapest node of `gpus` GPUs of a type, or None when nobody rents that shape."""
    found = list_offers(gpu=gpu, gpus=gpus, capacity=capacity, infra=infra)
    return found[0] if found else None


def cheapest_fitting_offer(
    gpu: str, gpus: int, capacity: Iterable[str] = ("on-demand",), infra: Iterable[str] | None = None
) -> Offer | None:
    """The cheapest node with at least `gpus` GPUs of a type (the smaller node on a price tie), or None."""
    fitting = [o for o in list_offers(gpu=gpu, capacity=capacity, infra=infra) if o.gpu_count >= gpus]
    return min(fitting, key=lambda o: (o.usd_per_hour, o.gpu_count), default=None)
