"""Search efficiency's rehearsal world: a scenario's truth, the simulated twin that serves it, the truth table.

A Scenario is what is true (the twin's profile per GPU, the offers) where the agent believes the shipped
calibrated profiles. Twin serves measurements from that truth with seeded noise (perf_model.predict on the
truth profile, noise of profile.noise_cv on the per-step and fixed parts: what tools/twin/server.py serves) and
bills them like a deployment (provisioning, cold or warm model load, every request, for the whole node). A truth's
spot_preemptions_per_node_hour takes spot nodes back as the local backend does (tools/backends/local.py): an
exponential draw per node launch; the attempt on it is cut and billed up to then; a node is started again, where
a probe is run again whole and a lane of the claim asks only for what it had not answered (Backend.benchmark's
recovery: the answers before the cut are evidence, BenchmarkSpec.remainder).
truth_table is every candidate's true objective and feasibility; Outcome is one strategy's run on one
scenario, with what it spent until it verified a near-optimal candidate (within NEAR of the optimum).

Used by benchmarks/search_efficiency.py (the strategies and the report) and, through it, rehearsal.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from worldtune.policies import perf_model
from worldtune.policies.search import Candidate, candidates, initial_state, objective_value
from worldtune.policies.search.lanes import MAX_LANES
from worldtune.tools.words.goal import Goal
from worldtune.tools.words.models import get_model
from worldtune.tools.words.offer import Offer
from worldtune.tools.words.profile import Profile
from worldtune.tools.words.workload import anchor_workload

T = TypeVar("T")
NEAR = 0.05  # "near-optimal": within 5% of the true optimum's objective


@dataclass
class Scenario:
    name: str
    truth: dict[str, Profile]
    offers: list[Offer]
    note: str


# ---- the simulated twin ----------------------------------------------------------------------------
class Twin:
    """Serves measurements from the scenario's truth with seeded noise, and bills them like a deployment."""

    def __init__(self, scenario: Scenario, seed: int) -> None:
        self.scenario = scenario
        self.rng = np.random.default_rng(seed)
        # the preemption draws have their own stream: a truth without preemption draws exactly what it did before
        self.preempt_rng = np.random.default_rng([seed, 1])
        self.usd = 0.0
        self.gpu_hours = 0.0
        self.preemptions = 0

    def served(self, cand: Candidate, steps: int) -> tuple[float, float]:
        """One request's seconds as the twin engine serves them: (the server's, what a probe's fit reads, as the
        agent's; the client's, X-Twin-Client-Time-S, what goals are judged on and nodes are busy for)."""
        profile = self.scenario.truth[cand.gpu]
        wl = anchor_workload("cosmos3-super", steps=steps)
        p = perf_model.predict(wl, cand.plan, profile)
        per_step, fixed = perf_model.noisy_parts(p, profile.noise_cv, self.rng)
        server = fixed + steps * per_step + p.guardrail_s
        return server, server + p.client_overhead_s

    def latency(self, cand: Candidate, steps: int) -> float:
        """One request's seconds on the client's clock (served)."""
        return self.served(cand, steps)[1]

    def bill(self, cand: Candidate, seconds: float) -> tuple[float, float]:
        usd = cand.offer.usd_per_hour * seconds / 3600
        gpu_hours = cand.offer.gpu_count * seconds / 3600
        self.usd += usd
        self.gpu_hours += gpu_hours
        return usd, gpu_hours

    def deploy_seconds(self, cand: Candidate, node_held: bool = False) -> float:
        """Seconds before the first request as the twin serves them: on a node already held (the plan changed in
        place) a warm load of the plan; on a new node the offer's provisioning and a cold load of the plan."""
        plan = cand.plan
        load_s = perf_model.load_time_s(get_model("cosmos3-super"), self.scenario.truth[cand.gpu], not node_held, plan)
        return load_s if node_held else cand.offer.provision_s + load_s

    def preempted_after_s(self, cand: Candidate) -> float | None:
        """Seconds from a node's launch until its spot capacity is taken back (a new draw per launch); None on
        demand or where the truth has no preemption."""
        rate = self.scenario.truth[cand.gpu].spot_preemptions_per_node_hour
        if cand.capacity != "spot" or rate <= 0:
            return None
        return float(self.preempt_rng.exponential(3600.0 / rate))

    def attempt(self, cand: Candidate, start_s: float, work: Callable[[], tuple[T, float]]) -> tuple[T, float]:
        """An attempt on a node that takes `start_s` before its first request (0 on a node up already) and `work`'s
        wall seconds after: (what the attempt that finished measured, node-seconds = wall seconds). A preemption
        bills the node up to it; the node is launched again (provisioning and a cold load) and the attempt is run
        again whole."""
        spent = 0.0
        while True:
            result, wall = work()
            cut = self.preempted_after_s(cand)
            if cut is None or cut >= start_s + wall:
                return result, spent + start_s + wall
            self.preemptions += 1
            spent += cut
            start_s = self.deploy_seconds(cand)  # a fresh node: provisioning and a cold load

    def lane(self, cand: Candidate, start_s: float, n: int) -> tuple[list[float], float]:
        """A lane's share of a claim, `n` clips, on a node that takes `start_s` before its first request: (the
        latencies, node-seconds = wall seconds). A preemption bills the node up to it; the rounds answered before
        it are kept (evidence: BenchmarkSpec.remainder) and a node started again asks only for the rest."""
        latencies: list[float] = []
        spent = 0.0
        while True:
            got, _ = self.full_latencies(cand, n - len(latencies))
            replicas = cand.plan.replicas
            rounds = [got[i : i + replicas] for i in range(0, len(got), replicas)]
            cut = self.preempted_after_s(cand)
            t = start_s
            for answers in rounds:
                if cut is not None and t + max(answers) > cut:
                    break
                t += max(answers)
                latencies += answers
            else:
                return latencies, spent + t
            self.preemptions += 1
            spent += cut or 0.0
            start_s = self.deploy_seconds(cand)  # a fresh node: provisioning and a cold load

    def full_latencies(self, cand: Candidate, n: int) -> tuple[list[float], float]:
        """n anchor clips spread over the replicas; wall seconds = rounds x the slowest clip of each round."""
        replicas = cand.plan.replicas
        latencies = [self.latency(cand, 35) for _ in range(n)]
        rounds = [latencies[i : i + replicas] for i in range(0, n, replicas)]
        return latencies, sum(max(r) for r in rounds)


def truth_candidates(scenario: Scenario, goal: Goal) -> list[Candidate]:
    """Every candidate as it truly is under the scenario's truth (which knows its noise exactly: no basis entry for
    noise_cv, so its percentiles take the normal quantile of its noise, not a prior's Student-t)."""
    state = initial_state(goal, scenario.offers)
    known = {
        gpu: p.model_copy(update={"basis": {k: v for k, v in p.basis.items() if k != "noise_cv"}})
        for gpu, p in scenario.truth.items()
    }
    return candidates(state.model_copy(update={"beliefs": known, "posteriors": {}}))


def truth_table(scenario: Scenario, goal: Goal) -> dict[str, tuple[float, bool]]:
    """Every candidate's true objective and feasibility under the scenario's truth."""
    return {c.key: (objective_value(goal, c), c.feasible) for c in truth_candidates(scenario, goal)}


def full_run_node_seconds(requests: int, lanes: int, latency_s: float, replicas: int) -> tuple[float, float]:
    """(wall seconds, node-seconds) of `requests` anchor clips split over `lanes` deployments of `replicas`
    replicas each, without their starts: each lane runs its share in rounds of its replicas."""
    per_lane = math.ceil(requests / lanes)
    wall = math.ceil(per_lane / replicas) * latency_s
    return wall, lanes * wall


@dataclass(frozen=True)
class Oracle:
    """What a search that knew the answer pays: one provisioning and one cold load per lane and the claim's run of
    the true best plan (its true mean latency), in GPU-hours and modelled wall seconds; and the serial oracle's
    GPU-hours beside it (the same run on one lane)."""

    key: str
    gpu_hours: float
    seconds: float
    lanes: int
    serial_gpu_hours: float


def oracle(scenario: Scenario, goal: Goal, requests: int, lanes: int = 1, aim_s: float | None = None) -> Oracle | None:
    """The floor a search's cost is measured against (None for an infeasible truth: there is no best plan): the
    claim's run of the true best plan over `lanes` deployments, or, given `aim_s`, over the fewest lanes (up to
    the search's MAX_LANES) that answer within it (issue 39's one-hour oracle: the search's own default aim)."""
    truth = {c.key: c for c in truth_candidates(scenario, goal) if c.feasible}
    if not truth:
        return None
    best = min(truth.values(), key=lambda c: objective_value(goal, c))
    start = Twin(scenario, 0).deploy_seconds(best)
    replicas = best.plan.replicas
    rate = scenario.truth[best.gpu].spot_preemptions_per_node_hour / 3600.0 if best.capacity == "spot" else 0.0
    # (a spot truth's lanes: their expected restarts, each going on from its last answered round)
    n = lanes
    for n in range(lanes, MAX_LANES + 1) if aim_s is not None else [lanes]:
        wall, _ = full_run_node_seconds(requests, n, best.latency_s, replicas)
        lane_s = expected_lane_s(start + wall, rate, start, best.latency_s)
        if aim_s is None or lane_s <= aim_s:
            break
    hours = best.offer.gpu_count * n * lane_s / 3600
    serial_s = expected_lane_s(start + full_run_node_seconds(requests, 1, best.latency_s, replicas)[1], rate, start,
                               best.latency_s)  # fmt: skip
    serial = best.offer.gpu_count * serial_s / 3600
    return Oracle(key=best.key, gpu_hours=hours, seconds=lane_s, lanes=n, serial_gpu_hours=serial)


def expected_lane_s(seconds: float, rate_per_s: float, restart_s: float, round_s: float) -> float:
    """Expected node-seconds of a lane of `seconds` (its start included) whose node is taken back at `rate_per_s`
    (a Poisson process) and started again (`restart_s`), going on from its last answered round: each preemption
    costs a restart and the round it cut (half of one on average), and they come at the rate over the whole time,
    so T = seconds + rate x T x (restart + round / 2)."""
    lost = rate_per_s * (restart_s + round_s / 2)
    return seconds / (1 - lost) if lost < 1 else math.inf


@dataclass
class Outcome:
    strategy: str
    scenario: str
    hit_gpu_hours: float | None = None
    hit_usd: float | None = None
    total_gpu_hours: float = 0.0
    total_usd: float = 0.0
    measured_candidates: int = 0
    recommendation: str | None = None
    regret: float | None = None
    stop: str = ""
    seconds: float = 0.0  # modelled wall seconds to the verdict (the actions of one decision run side by side)
    lanes: int = 1  # the most lanes a full run took
    extra: dict[str, Any] = field(default_factory=dict)


def finish(out: Outcome, twin: Twin, rec: str | None, truth: dict[str, tuple[float, bool]], best: float) -> Outcome:
    out.total_gpu_hours, out.total_usd, out.recommendation = twin.gpu_hours, twin.usd, rec
    if rec is not None:
        value, feasible = truth[rec]
        out.regret = value / best - 1 if feasible and math.isfinite(best) else math.inf
    return out


def is_near(key: str, truth: dict[str, tuple[float, bool]], best: float) -> bool:
    value, feasible = truth[key]
    return feasible and value <= best * (1 + NEAR)
