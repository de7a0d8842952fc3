"""Local deployments: a 2x plan starts two real twin processes, both healthy; teardown leaves nothing running."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from worldtune.tools.backends.local import LocalBackend, _alive
from worldtune.tools.deployments import deploy as deploying
from worldtune.tools.store.database import Store
from worldtune.tools.words.deploy_request import DeployRequest
from worldtune.tools.words.errors import InvalidInput

pytestmark = pytest.mark.integration


def test_two_replicas_deploy_serve_and_tear_down(tmp_path: Path) -> None:
    store = Store(tmp_path / "w.db")
    seen: list[str] = []
    dep = deploying.deploy(
        DeployRequest(gpu="H200", plan="2xcfg2-u2-hsdp4", time_scale=1000.0, run_id="r1"),
        store=store,
        progress=lambda message, fraction: seen.append(message),
    )
    try:
        assert dep.state == "ready" and len(dep.endpoints) == 2 and dep.endpoints[0] != dep.endpoints[1]
        for url in dep.endpoints:
            assert httpx.get(f"{url}/health").json() == {"status": "healthy"}
            assert httpx.get(f"{url}/v1/models").json()["data"][0]["id"] == "nvidia/Cosmos3-Super"
        assert dep.usd_per_hour == 0.0 and dep.offer is not None and dep.offer.gpu_count >= 8
        (open_row,) = store.ledger(open_only=True)
        assert open_row["cluster"] == dep.cluster and open_row["deployment_id"] == dep.id
        assert deploying.get_deployment(dep.id, store=store).state == "ready"
        assert [d.id for d in deploying.list_deployments(run_id="r1", store=store)] == [dep.id]
        assert seen and "ready" in seen[-1]
        # launching again is harmless: the same processes, still ready
        again = LocalBackend(store).launch(dep)
        assert again.endpoints == dep.endpoints and again.state == "ready"
    finally:
        pids = list(dep.handle.pids)
        gone = deploying.teardown(dep.id, store=store)
    assert gone.state == "terminated" and gone.terminated_at is not None
    assert not any(_alive(pid) for pid in pids)
    assert store.ledger(open_only=True) == []
    assert deploying.teardown(dep.id, store=store).state == "terminated"  # twice is harmless
    for url in dep.endpoints:
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{url}/health", timeout=2.0)


def test_a_dead_replica_is_reported_failed(tmp_path: Path) -> None:
    store = Store(tmp_path / "w.db")
    dep = deploying.deploy(DeployRequest(gpu="H200", plan="2xcfg2-u2-hsdp4", time_scale=1000.0), store=store)
    pids = list(dep.handle.pids)
    try:
        first = pids[0]
        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while _alive(first) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert deploying.get_deployment(dep.id, store=store).state == "failed"
    finally:
        deploying.teardown(dep.id, store=store)
    assert not any(_alive(pid) for pid in pids)  # the surviving replica is stopped too
    assert store.ledger(open_only=True) == []


def test_refusals_start_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path / "w.db")
    with pytest.raises(InvalidInput, match="no GPU"):
        deploying.deploy(DeployRequest(gpu="H200", plan="cfg2-u4-hsdp8", engine="vllm-omni"), store=store)
    with pytest.raises(InvalidInput, match="plan"):
        deploying.deploy(DeployRequest(gpu="H200", plan="tp3"), store=store)
    with pytest.raises(InvalidInput, match="gpu"):
        deploying.deploy(DeployRequest(gpu="Z100", plan="tp8"), store=store)
    assert store.list_deployments() == [] and store.ledger() == []


def test_an_unreachable_kubernetes_is_a_clear_refusal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))
    store = Store(tmp_path / "w.db")
    with pytest.raises(InvalidInput, match="infra='kubernetes'"):
        deploying.backend_for("kubernetes", store)
    with pytest.raises(InvalidInput, match="slurm/<cluster name>"):
        deploying.backend_for("slurm", store)


def _server_times(url: str, n: int) -> list[float]:
    """The server times (X-Inference-Time-S, model seconds) of n sync requests, 4 steps each, one at a time."""
    form = {"prompt": "a robot", "size": "1280x720", "num_frames": "189", "fps": "24", "num_inference_steps": "4",
            "extra_params": '{"guardrails":false}'}  # fmt: skip
    with httpx.Client(timeout=120.0) as client:
        return [float(client.post(f"{url}/v1/videos/sync", data=form).headers["X-Inference-Time-S"]) for _ in range(n)]


def test_two_lanes_of_one_plan_draw_their_own_noise_from_one_distribution(tmp_path: Path) -> None:
    """Issue 39: every deployment's twin draws its own run-to-run noise, as separate nodes do (each started with
    --seed i once, so every lane of a plan replayed the same latencies and a claim pooled over lanes held a few
    distinct values); a given noise_seed repeats (the agent's rehearsals), and the distribution stays one."""
    from scipy.stats import ks_2samp

    store = Store(tmp_path / "w.db")
    n = 40
    lanes = [deploying.deploy(DeployRequest(gpu="H200", plan="1gpu", time_scale=3000.0), store=store) for _ in range(2)]
    seeded = [
        deploying.deploy(DeployRequest(gpu="H200", plan="1gpu", time_scale=3000.0, noise_seed=7), store=store)
        for _ in range(2)
    ]
    try:
        first, second = (_server_times(d.endpoints[0], n) for d in lanes)
        again = [_server_times(d.endpoints[0], n) for d in seeded]
    finally:
        for d in lanes + seeded:
            deploying.teardown(d.id, store=store)
    # each lane its own stream: the same seed replayed every value in order (times are in ms: a few ties by chance)
    assert sum(a == b for a, b in zip(first, second, strict=True)) < n // 4
    assert ks_2samp(first, second).pvalue > 1e-4  # one distribution: the plan's, with the profile's noise
    assert again[0] == again[1] and len(set(again[0])) > n // 2  # the same seed, the same sequence
    with pytest.raises(InvalidInput, match="noise_seed"):
        deploying.deploy(
            DeployRequest(gpu="H200", plan="1gpu", engine="vllm-omni", infra="slurm/x", noise_seed=1), store=store
        )


def test_a_spot_twin_is_preempted_at_its_profiles_rate_and_says_so(tmp_path: Path) -> None:
    """Issue 39 item 6: a rehearsal truth's spot_preemptions_per_node_hour makes the local backend's spot twins
    vanish at a drawn moment, as a cloud takes back a node: every replica gone at once, the deployment `preempted`
    (not failed), its ledger row closed saying why. On demand, the same profile never preempts."""
    import yaml

    from worldtune.policies.calibration import shipped_profile
    from worldtune.tools.backends.local import preemption_s
    from worldtune.tools.words.deployment import Deployment

    truth = shipped_profile("H200").model_copy(update={
        "load_base_s": 2.0, "load_gib_per_s_warm": 1000.0, "load_gib_per_s_cold": 1000.0, "guardrail_startup_s": 0.0,
        "spot_preemptions_per_node_hour": 20.0, "source": "test: spot nodes taken back every ~3 model-minutes",
    })  # fmt: skip
    path = tmp_path / "spot-truth.yaml"
    path.write_text(yaml.safe_dump(truth.model_dump(mode="json"), sort_keys=False))

    # a seed whose node is taken back once it serves (the load is ~3 model-s, the process start ~1 s of wall)
    def moment(seed: int) -> float:
        return preemption_s(Deployment(gpu="H200", plan="2x1gpu", capacity="spot", noise_seed=seed), truth) or 0.0

    seed = next(s for s in range(200) if 400.0 < moment(s) < 800.0)  # 8-16 s of wall: after both deploys, loaded
    store = Store(tmp_path / "w.db")
    common = {"time_scale": 50.0, "twin_profile": str(path), "noise_seed": seed}
    spot = deploying.deploy(DeployRequest(gpu="H200", plan="2x1gpu", capacity="spot", **common), store)
    steady = deploying.deploy(DeployRequest(gpu="H200", plan="2x1gpu", **common), store)
    try:
        assert spot.state == "ready" and spot.handle.preempt_at is not None
        assert steady.handle.preempt_at is None
        deadline = time.monotonic() + 120
        current = spot
        # the drawn moment is 8-16 s of wall away; a busy machine's slow /health may read 'loading' meanwhile
        while current.state in ("ready", "loading") and time.monotonic() < deadline:
            time.sleep(0.2)
            current = deploying.get_deployment(spot.id, store=store)
        assert current.state == "preempted", current
        assert not any(_alive(pid) for pid in current.handle.pids)
        (row,) = [r for r in store.ledger() if r["cluster"] == current.cluster]
        assert row["gone_at"] is not None and "preempted" in (row.get("detail") or row.get("note") or str(row))
        assert deploying.get_deployment(steady.id, store=store).state == "ready"
    finally:
        for d in (spot, steady):
            deploying.teardown(d.id, store=store)
