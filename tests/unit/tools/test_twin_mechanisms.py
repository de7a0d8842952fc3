"""The twin serves a rehearsal truth's mechanism terms: a profile that says "ring is slow" or "VAE patch gives
nothing" makes the served plan's clip take longer than the shipped profile predicts (in-process ASGI)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from worldtune.policies import perf_model
from worldtune.policies.calibration import shipped_profile
from worldtune.tools.twin.server import TwinConfig, create_app
from worldtune.tools.twin.video import make_mp4
from worldtune.tools.words.plan import Plan
from worldtune.tools.words.profile import Profile
from worldtune.tools.words.workload import anchor_workload

SCALE = 4000.0


@pytest.fixture(autouse=True, scope="module")
def encoded_clip() -> None:
    """Encode the anchor clip once up front (cached), as `serve` does: an encode must not count as model time."""
    make_mp4(1280, 720, 189, 24)


def served_stages(plan: str, profile: Profile) -> dict[str, float]:
    """The model seconds of each stage the twin reports for one anchor clip of `plan` (X-Stage-Durations: model
    time, free of the wall-clock queueing a loaded machine adds; noise off: the profile's cv is 0)."""
    config = TwinConfig(
        plan=plan, time_scale=SCALE, load_time_s=0.0, guardrails=False, sync_timeout_s=1e6, stage_profiler=True
    )
    app, _ = create_app(config, profile.with_changes(noise_cv=0.0))
    fields = anchor_workload().form_fields()
    files = [(k, (None, v)) for k, v in fields.items()]

    async def main() -> Any:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://twin") as client:
            return await client.post("/v1/videos/sync", files=files, timeout=60)

    answer = asyncio.run(main())
    assert answer.status_code == 200
    stages: dict[str, float] = json.loads(answer.headers["X-Stage-Durations"])
    return {name.rsplit(".", 1)[-1] if "diffuse" in name else name: value for name, value in stages.items()}


def diffuse(plan: str, profile: Profile) -> float:
    return served_stages(plan, profile)["diffuse"]


def forward(plan: str, profile: Profile) -> float:
    """Text encode + denoising + VAE decode: the pipeline's stages as vLLM-Omni reports Cosmos3's (the text path runs
    inside `diffuse`; there is no `.forward` key)."""
    stages = served_stages(plan, profile)
    return stages["diffuse"] + next(v for k, v in stages.items() if k.endswith(".vae.decode"))


def test_a_slow_ring_truth_makes_the_served_ring_plan_slower() -> None:
    shipped = shipped_profile("H200")
    slow = shipped.with_changes(ring_chunk_efficiency=0.7, ring_merge_ms_per_gelem=60.0)
    believed, served = diffuse("cfg2-u2-r2-hsdp8", shipped), diffuse("cfg2-u2-r2-hsdp8", slow)
    predicted = perf_model.predict(anchor_workload(), Plan.parse("cfg2-u2-r2-hsdp8"), slow)
    before = perf_model.predict(anchor_workload(), Plan.parse("cfg2-u2-r2-hsdp8"), shipped)
    # `diffuse` holds the text path too (as Cosmos3's does), the same in both: the difference is the steps'
    assert served - believed == pytest.approx(35 * (predicted.per_step_s - before.per_step_s), rel=1e-4)
    assert served > believed * 1.1
    # a plan without ring is served as before
    assert diffuse("cfg2-u4-hsdp8", slow) == pytest.approx(diffuse("cfg2-u4-hsdp8", shipped), rel=1e-6)


def test_a_vae_patch_gives_nothing_truth_takes_the_gain_away() -> None:
    shipped = shipped_profile("H200")
    nothing = shipped.with_changes(vae_tile_fixed_share=0.3)
    assert forward("cfg2-u4-hsdp8-vae8", shipped) < forward("cfg2-u4-hsdp8", shipped) - 1.0
    assert forward("cfg2-u4-hsdp8-vae8", nothing) >= forward("cfg2-u4-hsdp8", nothing)
