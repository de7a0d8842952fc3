"""The search's words: what it may recommend (Candidate), what it measured (Measurement), what it asks for
next (Action) or why it stops (Decision), and everything it knows (SearchState), with the constants of its rules.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from pydantic import BaseModel, Field

from worldtune.policies import belief
from worldtune.tools.words import stats
from worldtune.tools.words.goal import Goal
from worldtune.tools.words.offer import Offer
from worldtune.tools.words.plan import DescribedPlanField, Plan, PlanField
from worldtune.tools.words.profile import Profile

ActionKind = Literal["probe", "full"]
StopKind = Literal["converged", "budget", "iteration_cap", "infeasible", "declined", "deadline"]
PROBE_LOW_STEPS = 4  # a probe's short step count; its other is the goal's own (probe_steps)
PROBE_REPEATS = 2  # requests per probe step count
PROBE_WARMUP = 1  # a probe's warm-up request at its smallest step count first (not counted, billed)
FULL_REQUESTS = 5  # the fewest full requests a run takes when the claim's count does not fit the budget
STOP_LEVEL = 0.05  # converged / infeasible below this posterior probability
CONFIDENCE = stats.TOLERANCE_CONFIDENCE
OPTIMISM_Z = 1.645  # one-sided 95%, for the spend estimate's optimistic values
MAX_NODES = 64
RETRIES = 1  # a bad measurement is repeated once on a fresh deployment, then the candidate is failed


def probe_steps(steps: int) -> tuple[int, int]:
    """The step counts a probe asks for on a workload of `steps`: a short one and the workload's own. The fit of
    latency = fixed + steps x per_step through them is read where the goal is (at `steps` the probe's estimate is
    its requests' mean, not an extrapolation: two short counts, 4 and 8, amplified each request's noise about 7x
    at 35 steps), and its per-step slope spans the whole range. A request at the goal's steps takes as long as a
    clip: candidates.probe_seconds prices it, and the benchmark sends it as a job where it may outlast the sync
    timeout (tools/words/bench_spec.api_for)."""
    lo = min(PROBE_LOW_STEPS, max(1, steps // 2))
    return lo, max(steps, lo + 1)


class CandidateKey(NamedTuple):
    """A candidate's key, "<offer id>|<plan>" (the form checkpoints, actions and measurements carry), read once."""

    offer_id: str
    plan: Plan

    @classmethod
    def of(cls, key: str) -> CandidateKey:
        offer_id, _, plan = key.partition("|")
        return cls(offer_id, Plan.parse(plan))

    @property
    def shape(self) -> str:
        """The offer's GPU shape, "H200:8": what a measurement depends on besides the plan (not price or capacity)."""
        return next(part for part in self.offer_id.split("/") if ":" in part)

    @property
    def gpu(self) -> str:
        return self.shape.split(":", 1)[0]

    @property
    def hardware(self) -> str:
        """The shape and the plan, "H200:8|tp8": measurements of one plan on one GPU shape pool, whatever the offer."""
        return f"{self.shape}|{self.plan}"


def offer_of(key: str) -> str:
    """The offer id of a candidate key (no plan parse: the hot paths that group lanes by offer ask only this)."""
    return key.partition("|")[0]


class Candidate(BaseModel):
    """One thing that could be recommended: an offer, a plan on its node, and how many such nodes."""

    key: str
    gpu: str
    plan: DescribedPlanField
    offer: Offer
    nodes: int = 1
    latency_s: float = Field(description="predicted (posterior mean) or measured p50 latency per clip")
    latency_q_s: float = Field(description="latency at the goal's percentile (predicted, or the measured bound)")
    per_step_s: float
    fixed_s: float
    overhead_s: float = Field(
        default=0.0,
        description="per request beyond fixed + steps x per_step: the guardrail and the client's MP4 encode, request "
        "and transfer (the model's; a probe's fit does not separate it)",
    )
    steps: int = Field(
        default=35, description="the goal workload's denoising steps (what a probe asks at: probe_steps)"
    )
    load_s: float = Field(description="warm load: the plan started again on a node that already has the weights")
    cold_load_s: float = Field(default=0.0, description="the first load on a new node (weights from disk); 0: load_s")
    clips_per_hour_per_node: float
    usd_per_clip: float
    memory_gib_per_gpu: float
    sigma: float = Field(description="relative (log-space) one-sigma of the latency under the posterior")
    feasible: bool = Field(description="meets the goal's constraints (predicted at the posterior mean, or measured)")
    violations: list[str] = Field(default_factory=list)
    stage: Literal["predicted", "probed", "measured"] = "predicted"
    evidence: str = Field(default="", description="for a measured candidate: the claim or bound it was judged on")
    start_factor: float = Field(
        default=1.0, gt=0, description="this run's measured starts over the belief's (its GPU type; 1: as believed)"
    )

    @property
    def replicas(self) -> int:
        return self.plan.replicas * self.nodes

    @property
    def capacity(self) -> str:
        return self.offer.capacity


class Measurement(BaseModel):
    """What was measured on one candidate (probe: per-step and fixed; full: latencies and throughput)."""

    key: str
    kind: ActionKind
    per_step_s: float | None = None
    fixed_s: float | None = None
    latencies_s: list[float] = Field(default_factory=list)
    clips_per_hour_per_node: float | None = None
    usd: float = 0.0
    gpu_hours: float = 0.0
    benchmark_id: str = ""
    benchmark_ids: list[str] = Field(
        default_factory=list, description="full runs over lanes: every benchmark whose samples were pooled"
    )
    predicted_before: float | None = Field(default=None, description="what the belief predicted for this measure")
    requested: int = Field(default=0, description="full requests asked for (0: not known)")
    repeats: int = Field(default=1, ge=1, description="probes: requests per step count")
    probe_points: list[tuple[int, float]] = Field(
        default_factory=list, description="probes: (steps, seconds) of every request; their repeats teach the noise"
    )
    failed_requests: int = 0
    contaminated: int = Field(default=0, description="answers that waited behind load that was not ours")
    engine_problem: str = Field(default="", description="what the deployment check found wrong, if anything")
    lanes: int = Field(default=1, ge=1, description="full runs: deployments whose samples were pooled")
    decided: str = Field(default="", description="full runs stopped once the claim was decided: why")
    start_s: float | None = Field(
        default=None,
        ge=0,
        description="model seconds the node this measurement started took from launch to ready "
        "(provisioning and its load, cold on a new node, warm on a replanned one); None: it ran on a live one",
    )
    start_predicted_s: float | None = Field(
        default=None, gt=0, description="what the belief predicted for that start (candidates.believed_start_s)"
    )

    def benchmarks(self) -> list[str]:
        """Every benchmark this measurement rests on: the pooled lanes' or its one."""
        return self.benchmark_ids or ([self.benchmark_id] if self.benchmark_id else [])


class Action(BaseModel):
    """One verification step the search asks for."""

    key: str
    kind: ActionKind
    expected_usd: float
    expected_s: float
    needs_deploy: bool
    reason: str
    requests: int = Field(default=0, description="full runs: how many requests (the claim's count when affordable)")
    lanes: int = Field(default=1, ge=1, description="full runs: deployments of the plan the requests are dealt over")
    lane_requests: list[int] = Field(default_factory=list, description="full runs: requests per lane, first lane first")
    redeploy: bool = Field(default=False, description="a retry: tear the old deployment down and start a fresh one")
    early_lanes: int = Field(
        default=0,
        ge=0,
        description="probes: new nodes of the likeliest optimum's offer launched with this probe, so that the "
        "claim's run that likely follows starts on them at once (their provisioning and cold load overlap it)",
    )
    early_plan: PlanField | None = Field(
        default=None, description="probes: the plan those nodes start with (the full run's)"
    )
    early_after_s: float = Field(
        default=0.0,
        ge=0,
        description="probes: modelled seconds into the probe at which those nodes are launched, so that they are "
        "up when it ends (the probe's modelled time less a node's start; 0: at once)",
    )
    spares_held: int = Field(
        default=0, ge=0, description="probes: spare nodes already up on its offer, kept (and billed) through it"
    )
    value: float = Field(default=0.0, description="expected improvement (share of the objective) the action buys")
    rides: bool = Field(
        default=False,
        description="probes: on a node launched for the claim's run that likely follows the decision's first "
        "probe, at once with it; the run then takes the node (replanned, a warm load)",
    )


class NearestOption(BaseModel):
    """What comes closest to an infeasible goal: the latency reachable, the bound it would meet, its cost."""

    key: str
    gpu: str
    plan: str
    stage: str
    latency_q_s: float = Field(description="posterior mean (or measured bound) at the goal's percentile")
    would_meet_s: float = Field(description="the bound it meets at 95% posterior probability")
    usd_per_clip: float


class Decision(BaseModel):
    """What to do next, or why to stop, and the best verified candidate so far."""

    actions: list[Action] = Field(default_factory=list)
    stop_reason: str | None = None
    stop_kind: StopKind | None = None
    best: str | None = None
    p_beaten: float | None = Field(default=None, description="P(an unverified feasible candidate beats the best)")
    p_feasible: float | None = Field(default=None, description="P(any candidate meets the constraints)")
    nearest: list[NearestOption] = Field(default_factory=list)


class Rejected(BaseModel):
    """A measurement that was not used as evidence, and why."""

    key: str
    kind: ActionKind
    benchmark_id: str = ""
    reason: str


class SearchState(BaseModel):
    """Everything the search knows; JSON-serialisable so the agent can checkpoint it."""

    goal: Goal
    offers: list[Offer]
    beliefs: dict[str, Profile] = Field(description="GPU type -> the profile at the posterior's MAP")
    priors: dict[str, Profile] = Field(default_factory=dict, description="GPU type -> the prior (shipped) profile")
    posteriors: dict[str, belief.Posterior] = Field(default_factory=dict)
    measurements: list[Measurement] = Field(default_factory=list)
    surprises: dict[str, list[float]] = Field(default_factory=dict, description="GPU -> |measured/predicted - 1|")
    deployed: list[str] = Field(default_factory=list, description="candidate keys with a live deployment")
    reuse_nodes: bool = Field(default=True, description="a held node takes the next candidate on its offer (replan)")
    spare_lanes: list[str] = Field(
        default_factory=list,
        description="candidate keys (offer|plan) of the nodes launched early for a claim's run, up and not yet used",
    )
    spent_usd: float = 0.0
    elapsed_s: float = Field(default=0.0, ge=0, description="modelled wall seconds of the search so far")
    spent_gpu_hours: float = 0.0
    iterations: int = 0
    include_fp8: bool = False
    failed: list[str] = Field(default_factory=list, description="candidate keys whose deployment or benchmark failed")
    failures: dict[str, str] = Field(default_factory=dict, description="failed candidate key -> why")
    inconclusive: list[str] = Field(
        default_factory=list, description="candidate keys whose probes could not separate per-step from fixed time"
    )
    rejected: list[Rejected] = Field(default_factory=list, description="measurements not used as evidence")
    retry: list[str] = Field(default_factory=list, description="candidate keys whose last measurement is to be redone")

    def prior(self, gpu: str) -> Profile:
        return self.priors.get(gpu) or self.beliefs[gpu]

    def posterior(self, gpu: str) -> belief.Posterior:
        """The fitted posterior, else the prior around the current belief (a caller may swap `beliefs` for a truth)."""
        return self.posteriors.get(gpu) or belief.prior_posterior(self.beliefs[gpu])


class ModeShift(BaseModel):
    """How one of the posterior's other explanations moves a candidate: offsets from the MAP's prediction
    (log latency, log service time) and the sensitivities at that mode."""

    d_latency: float
    d_service: float
    grad_latency: list[float]
    grad_service: list[float]


class Assessed(BaseModel):
    """A candidate with what the posterior draws need: its sensitivities, other modes and its own (model) error."""

    cand: Candidate
    grad_latency: list[float]
    grad_service: list[float]
    own_sigma: float = Field(description="independent relative error of this plan's prediction")
    modes: list[ModeShift] = Field(default_factory=list, description="per alternative mode of the GPU's posterior")
