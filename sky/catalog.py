"""Writes the SkyPilot catalog rows worldtune needs into a SkyPilot home, from the project's offers snapshot.

Without network SkyPilot's optimizer (and any GPU request, even on Slurm) fails unless catalog files
sit under `<home>/.sky/catalogs/v8/`. Files written there by hand carry no `.meta/*.md5`, so SkyPilot
treats them as user-modified and never re-fetches them. The rows come from
tools/data/offers-snapshot.json, so nothing here depends on files outside the project.

Written: `common/accelerators.csv` (GPU name -> clouds, for the GPUs worldtune knows) and
`<cloud>/vms.csv` for the clouds whose catalog needs nothing else offline (Nebius, Lambda). AWS rows
are not written: SkyPilot's AWS catalog also needs per-account zone mappings fetched with credentials.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from worldtune.tools.words.gpus import GPUS, get_gpu

CATALOG_VERSION = "v8"
# Cloud names as SkyPilot's catalog spells them in accelerators.csv, per folder name.
CLOUD_LABELS = {"nebius": "nebius", "lambda": "Lambda", "aws": "AWS", "slurm": "Slurm", "kubernetes": "Kubernetes"}
VMS_CLOUDS = ("nebius", "lambda")
VMS_COLUMNS = (
    "InstanceType",
    "AcceleratorName",
    "AcceleratorCount",
    "vCPUs",
    "MemoryGiB",
    "Price",
    "Region",
    "GpuInfo",
    "SpotPrice",
)
MIB_PER_GIB = 1024


def catalog_root(home: Path) -> Path:
    """`<home>/.sky/catalogs/v8`: where SkyPilot reads catalog files from under that home."""
    return home / ".sky" / "catalogs" / CATALOG_VERSION


def _snapshot(path: Path) -> list[dict[str, Any]]:
    return list(json.loads(path.read_text())["offers"])


def _gpu_info(gpu: str, count: int) -> str:
    """SkyPilot's GpuInfo cell (a Python-literal dict), with the memory of the GPU in MiB."""
    mib = round(get_gpu(gpu).memory_gib * MIB_PER_GIB)
    return str(
        {
            "Gpus": [{"Name": gpu, "Manufacturer": "NVIDIA", "Count": count, "MemoryInfo": {"SizeInMiB": mib}}],
            "TotalGpuMemoryInMiB": mib * count,
        }
    )


def accelerators_csv(rows: Iterable[dict[str, Any]]) -> str:
    """common/accelerators.csv: every GPU worldtune knows, with the clouds that rent it (plus Slurm)."""
    clouds: dict[str, set[str]] = {name: {"Slurm", "Kubernetes"} for name in GPUS}
    for row in rows:
        label = CLOUD_LABELS.get(str(row["infra"]))
        if label and row["gpu"] in clouds:
            clouds[str(row["gpu"])].add(label)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["AcceleratorName", "Clouds"])
    for name in sorted(clouds):
        writer.writerow([name, str(sorted(clouds[name]))])
    return out.getvalue()


def vms_csv(rows: Iterable[dict[str, Any]], cloud: str) -> str:
    """<cloud>/vms.csv rows for one cloud from the snapshot rows."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(VMS_COLUMNS)
    for row in rows:
        if row["infra"] != cloud:
            continue
        spot = row.get("spot_usd_per_hour")
        writer.writerow(
            [
                row["instance_type"],
                row["gpu"],
                row["gpu_count"],
                row["vcpus"],
                row["memory_gib"],
                f"{float(row['usd_per_hour']):.2f}",
                row["region"],
                _gpu_info(str(row["gpu"]), int(row["gpu_count"])),
                "" if spot is None else f"{float(spot):.2f}",
            ]
        )
    return out.getvalue()


def write_catalog(home: Path, snapshot: Path, overwrite: bool = False) -> list[Path]:
    """Write the catalog files into `home`'s SkyPilot catalog folder from the offers snapshot file `snapshot`
    (tools/plans/offers.py SNAPSHOT_FILE); returns the files written.

    Existing files are kept unless `overwrite` (a user's own, fresher catalog wins).
    """
    rows = _snapshot(snapshot)
    root = catalog_root(home)
    files = {root / "common" / "accelerators.csv": accelerators_csv(rows)}
    for cloud in VMS_CLOUDS:
        files[root / cloud / "vms.csv"] = vms_csv(rows, cloud)
    written = []
    for path, text in files.items():
        if path.exists() and not overwrite:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written
