"""A claim's run on new nodes launches its extra lanes with its first node (agent/claim_run, issue 35's Slurm
profile: the lanes test launched one cluster after the other). Which runs do, and what a failed first node bills."""

from __future__ import annotations

from worldtune.agent.claim_run import lanes_to_launch_with_the_first, with_lanes_billed
from worldtune.agent.state import VerifyTask
from worldtune.agent.steps import failed_update
from worldtune.policies.search import Action, Candidate, candidates, initial_state
from worldtune.tools.plans.offers import all_offers
from worldtune.tools.words.deployment import Deployment
from worldtune.tools.words.goal import Goal
from worldtune.tools.words.workload import anchor_workload

GOAL = Goal(workload=anchor_workload(), latency_bound_s=150.0, gpus=["H200"], confidence=0.95)
CAND = next(c for c in candidates(initial_state(GOAL, all_offers("snapshot"))) if c.offer.gpu_count == 8)


def task(kind: str = "full", shares: tuple[int, ...] = (30, 29), deployment_id: str | None = None,
         spares: dict[str, str] | None = None) -> VerifyTask:  # fmt: skip
    action = Action(key=CAND.key, kind=kind, expected_usd=10.0, expected_s=5000.0, needs_deploy=True, reason="",
                    requests=sum(shares), lanes=len(shares), lane_requests=list(shares))  # fmt: skip
    return VerifyTask(run_id="tune-x", goal=GOAL, options=None, action=action, candidate=CAND,  # type: ignore[typeddict-item]
                      deployment_id=deployment_id, cap_usd=100.0, iteration=1, used_benchmarks=[],
                      billed_deployments=[], spare_lanes=spares or {})  # fmt: skip


def count(t: VerifyTask, cand: Candidate = CAND) -> int:
    return lanes_to_launch_with_the_first(t, cand, t["action"])


def test_only_a_claim_on_a_new_first_node_without_spares_launches_its_lanes_with_it() -> None:
    assert count(task(shares=(20, 20, 19))) == 2
    assert count(task(shares=(59,))) == 0  # one lane
    assert count(task(kind="probe")) == 0
    assert count(task(deployment_id="wt-live")) == 0  # the first node is live: the lanes follow as before
    assert count(task(spares={"wt-spare": f"{CAND.offer.id}|{CAND.plan}"})) == 0  # spares of its offer serve
    assert count(task(spares={"wt-spare": f"another-offer|{CAND.plan}"})) == 1


def test_a_failed_first_node_bills_the_starts_of_the_lanes_launched_beside_it() -> None:
    action = task()["action"]
    update = failed_update(action, CAND, "deploy failed: boom", (1.0, 0.5))
    lane = Deployment(gpu="H200", plan=CAND.plan, infra="local")
    billed = with_lanes_billed(update, CAND, [(lane, 3600.0), "deploy failed: no"])
    m = billed["results"][0].measurement
    assert m.usd == 1.0 + CAND.offer.usd_per_hour and m.gpu_hours == 0.5 + CAND.offer.gpu_count
    assert billed["events"] == update["events"] and billed["results"][0].failed
    assert with_lanes_billed(update, CAND, ["deploy failed: no"]) == update  # nothing launched, nothing billed
