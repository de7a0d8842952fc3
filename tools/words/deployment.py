"""Deployment: an offer + a plan + the engine running on it; and the one interface every infra implements.

Infra backends (local processes, SkyPilot clusters, Kubernetes) share `Backend`: launch, status,
replan (restart the engine under another plan on the node(s) already held), teardown. Every cluster a
backend starts is written to the ledger (tools/store/database.py) before launch and marked gone after teardown, so
nothing is ever left running unnoticed.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from worldtune.tools.words.errors import InvalidInput, WorldtuneError
from worldtune.tools.words.infra import FORMS, Infra, InfraField
from worldtune.tools.words.offer import Offer
from worldtune.tools.words.plan import DescribedPlanField, Plan

if TYPE_CHECKING:
    from worldtune.tools.words.bench_spec import BenchmarkSpec
    from worldtune.tools.words.result import BenchmarkResult
    from worldtune.tools.words.sample import Sample

Engine = Literal["twin", "vllm-omni"]
ENGINES: tuple[str, ...] = ("twin", "vllm-omni")
DeploymentState = Literal["pending", "provisioning", "loading", "ready", "failed", "preempted", "terminated"]
ALIVE_STATES: tuple[str, ...] = ("pending", "provisioning", "loading", "ready")  # it holds (or is taking) a node
Progress = Callable[[str, float | None], None]  # (message, fraction done or None)


def new_deployment_id() -> str:
    return f"wt-{secrets.token_hex(4)}"


def stable_seed(*parts: object) -> int:
    """A seed in [0, 2^62) from `parts`, the same in every process and run (sha256 of their text, not hash())."""
    digest = hashlib.sha256("|".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 2


# The environment variable (and SkyPilot secret) that carries a public server's API key: `vllm serve --api-key`
# reads it on the cluster, worldtune's benchmark and readiness checks send it as a bearer token.
API_KEY_ENV = "WORLDTUNE_API_KEY"
API_KEYS_DIR = "api-keys"  # next to the results database: one 0600 file per deployment whose key was generated


def api_key_file(results_db: Path, deployment_id: str) -> Path:
    """Where a deployment's generated API key is kept: beside the results database, named by the deployment."""
    return results_db.parent / API_KEYS_DIR / deployment_id


def stored_api_key(results_db: Path, deployment_id: str) -> str | None:
    """$WORLDTUNE_API_KEY when set, else the deployment's generated key if it has one."""
    given = os.environ.get(API_KEY_ENV)
    if given:
        return given
    path = api_key_file(results_db, deployment_id)
    return path.read_text().strip() if path.is_file() else None


class Handle(BaseModel):
    """How the backend that started a deployment finds what it started: its processes here (the local backend) or
    its serve job on the cluster (SkyPilot). Kept with the deployment's record; `detail` is only words for people."""

    model_config = ConfigDict(extra="forbid")

    pgid: int = Field(default=0, ge=0, description="local: the process group of its twin servers")
    pids: list[int] = Field(default_factory=list, description="local: one server process per replica")
    starts: list[int | None] = Field(
        default_factory=list, description="local: each process's start time in clock ticks (a reused pid is not it)"
    )
    ports: list[int] = Field(default_factory=list, description="local: the replicas' ports")
    profile: str = Field(default="", description="local: the profile file its twins run with")
    preempt_at: float | None = Field(
        default=None, description="local spot twin: when (wall clock) the rehearsal's truth takes the node back"
    )
    serve_job: int | None = Field(default=None, description="SkyPilot: the job id of its servers on the cluster")

    def processes(self) -> dict[int, int | None]:
        """Its processes: pid -> start time in clock ticks (None where it was not recorded)."""
        return {pid: self.starts[i] if i < len(self.starts) else None for i, pid in enumerate(self.pids)}

    @classmethod
    def from_record(cls, text: str) -> Handle | None:
        """The handle a ledger row's detail holds (the local backend writes it there first), else None (words)."""
        try:
            return cls.model_validate_json(text or "{}")
        except ValidationError:
            return None


class Deployment(BaseModel):
    """A plan running (or about to run) on an offer, with its endpoints and state."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(default_factory=new_deployment_id)
    run_id: str | None = Field(default=None, description="tuning run that owns it, if any")
    model: str = "cosmos3-super"
    gpu: str
    plan: DescribedPlanField
    infra: InfraField = Field(default_factory=lambda: Infra.parse("local"), description="where it runs: " + FORMS)
    engine: Engine = "twin"
    capacity: str = "on-demand"
    offer: Offer | None = None
    usd_per_hour: float = 0.0
    hold_hours: float | None = Field(default=None, ge=0, description="hours the caller asked to keep it up once ready")
    committed_usd: float = Field(
        default=0.0, ge=0, description="price x hours asked (provisioning + load + hold) when it was started"
    )
    state: DeploymentState = "pending"
    endpoints: list[str] = Field(default_factory=list, description="base URLs, one per replica")
    cluster: str | None = Field(default=None, description="SkyPilot cluster / Kubernetes name / local pid group")
    twin_profile: str | None = Field(default=None, description="profile file the twin engine runs with")
    guardrails: bool = Field(
        default=False,
        description="the server runs Cosmos3's guardrails (loaded at start, checked per request); off: --no-guardrails",
    )
    time_scale: float = Field(default=1.0, gt=0, description="twin only: sleeps divided by this")
    noise_seed: int | None = Field(
        default=None,
        ge=0,
        lt=2**63,
        description="twin only: the seed of its run-to-run noise (replica i draws from noise_seed + i); None: one "
        "drawn from the deployment's id, so every deployment draws its own noise, as separate nodes do",
    )
    created_at: float = Field(default_factory=time.time)
    ready_at: float | None = None
    modelled_load_s: float | None = Field(
        default=None,
        ge=0,
        description="twin only: the load the twin modelled (its profile's load of this plan, cold or warm, and the "
        "guardrails' start-up) in model seconds, SIMULATED; a real engine's load is its wall time (ready_at)",
    )
    terminated_at: float | None = None
    detail: str = Field(default="", description="what its backend last said of it, in words (a failure's reason)")
    handle: Handle = Field(default_factory=Handle, description="what its backend started, to find it again")
    loads: int = Field(default=0, ge=0, description="engine starts on this node: the first is cold, later ones warm")
    previous_plans: list[str] = Field(default_factory=list, description="plans it ran before a replan, oldest first")
    replanned_at: float | None = Field(default=None, description="when the current plan's restart began")

    def replica_seed(self, replica: int) -> int:
        """The twin's noise seed of replica `replica`: independent from every other deployment's (issue 39)."""
        return (self.noise_seed if self.noise_seed is not None else stable_seed(self.id)) + replica

    @property
    def alive(self) -> bool:
        return self.state in ALIVE_STATES

    def gpu_hours(self, now: float | None = None) -> float:
        """GPU-hours billed so far (from creation to termination or now)."""
        end = self.terminated_at or now or time.time()
        gpus = self.offer.gpu_count if self.offer else 0
        return max(0.0, end - self.created_at) / 3600.0 * gpus


class CutShort(WorldtuneError):
    """A benchmark attempt ended because the deployment's node went away under it."""


class MeasureHere(Protocol):
    """How to measure a deployment from this machine, and where a benchmark's samples are kept; the benchmark
    capability (tools/bench/benchmark.py) passes one to `Backend.benchmark`. A backend that measures elsewhere
    (SkyPilot: next to the server) keeps what it copies back with `keep`."""

    def measure(self, spec: BenchmarkSpec, benchmark_id: str, attempt: int) -> BenchmarkResult:
        """Run `spec` to the end as attempt `attempt` of `benchmark_id`, storing every sample; raise if cut short."""
        ...

    def cut_short(self, benchmark_id: str, attempt: int) -> str:
        """Mark the samples `attempt` measured before its node went away (kept, `interrupted`); say how many."""
        ...

    def next_seq(self, benchmark_id: str) -> int:
        """The number the next sample of `benchmark_id` gets (after every one kept so far)."""
        ...

    def answered(self, benchmark_id: str) -> int:
        """Full requests of `benchmark_id` answered so far, over every attempt (what a resumed attempt need not
        ask again: BenchmarkSpec.remainder)."""
        ...

    def keep(self, benchmark_id: str, sample: Sample, message: str) -> None:
        """Store one sample measured elsewhere (idempotent on its `seq`) and say where the benchmark stands."""
        ...


class Records(Protocol):
    """What a backend writes into the results database: its deployments, the cluster ledger and the rows of the
    benchmarks it runs next to the server. tools/store.Store satisfies it; backends are typed against this, so
    they stand on the words and never import the database."""

    path: Path

    def save_deployment(self, deployment: Deployment, if_alive: bool = False) -> None: ...

    def get_deployment(self, deployment_id: str) -> Deployment | None: ...

    def ledger_launch(
        self, cluster: str, backend: str, deployment_id: str | None = None, run_id: str | None = None
    ) -> None: ...

    def ledger_update(self, cluster: str, state: str, detail: str = "") -> None: ...

    def ledger_open(self, cluster: str) -> bool: ...

    def ledger_gone(self, cluster: str, detail: str = "") -> None: ...

    def create_benchmark(
        self, benchmark_id: str, config: dict[str, Any], deployment_id: str | None = None, run_id: str | None = None
    ) -> None: ...

    def update_benchmark(
        self,
        benchmark_id: str,
        *,
        status: str | None = None,
        progress: float | None = None,
        message: str | None = None,
        result: dict[str, Any] | None = None,
        error: str | None = None,
    ) -> None: ...

    def get_benchmark(self, benchmark_id: str) -> dict[str, Any] | None: ...


class Backend(Protocol):
    """What an infra must do to host deployments."""

    name: str
    # how long a status answer stays good for a caller that asks again (`get_deployment`): 0 where asking is
    # cheap (local processes); seconds where each ask is a remote call (SkyPilot: a status refresh and a job query)
    status_fresh_s: float

    def launch(self, deployment: Deployment, progress: Progress | None = None) -> Deployment:
        """Start the engine under the plan; return once ready (state 'ready') or raise."""
        ...

    def status(self, deployment: Deployment) -> Deployment:
        """Refresh the state (detects preemption / a vanished cluster)."""
        ...

    def replan(self, deployment: Deployment, plan: str, progress: Progress | None = None) -> Deployment:
        """Restart the engine under `plan` on the node(s) the deployment holds (no new node); return once ready."""
        ...

    def teardown(self, deployment: Deployment) -> Deployment:
        """Stop everything the deployment started; idempotent."""
        ...

    def recover(self, deployment: Deployment, progress: Progress | None = None) -> Deployment:
        """Bring a preempted deployment back on a node of the same offer (same id, owner and plan); return once
        ready or raise."""
        ...

    def benchmark(
        self,
        deployment: Deployment,
        spec: BenchmarkSpec,
        benchmark_id: str,
        here: MeasureHere,
        progress: Progress | None = None,
    ) -> tuple[Deployment, BenchmarkResult]:
        """Measure `spec` against the deployment, recovering from preemption (see `benchmark_with_recovery`).

        Returns the deployment as it ends (relaunched if it was preempted) and the completed attempt's result;
        every sample of every attempt is in the results database under `benchmark_id`."""
        ...


MAX_RECOVERIES = 2  # a benchmark cut short by preemption is run again at most this many times


def benchmark_with_recovery(
    backend: Backend,
    deployment: Deployment,
    attempt_on: Callable[[Deployment, int], BenchmarkResult],
    on_cut: Callable[[Deployment, int], str],
    progress: Progress | None = None,
    max_recoveries: int = MAX_RECOVERIES,
) -> tuple[Deployment, BenchmarkResult]:
    """What every backend's benchmark does when its node goes away under it.

    `attempt_on(deployment, attempt)` measures once and raises when cut short. Then the backend is asked for
    the deployment's state: preempted (and recoveries left) -> `on_cut(deployment, attempt)` marks what that
    attempt measured (kept: what it answered is evidence) and says so, the deployment is recovered (relaunched,
    same id) and measured again, for what is left (`BenchmarkSpec.remainder`: a closed-loop run asks only for
    the requests not yet answered); any other state -> the error stands. A plain failure of a live server is
    never retried.
    """
    say: Progress = progress or (lambda message, fraction: None)
    current = deployment
    for attempt in range(1, max_recoveries + 2):
        try:
            return current, attempt_on(current, attempt)
        except InvalidInput:
            raise  # refused before anything was measured: nothing to recover
        except Exception:
            now = backend.status(current)
            if now.state != "preempted" or attempt > max_recoveries:
                raise
            say(f"attempt {attempt} cut short by preemption; {on_cut(now, attempt)}; relaunching", None)
            current = backend.recover(now, progress)
    raise AssertionError("unreachable")


def benchmark_from_here(
    backend: Backend,
    deployment: Deployment,
    spec: BenchmarkSpec,
    benchmark_id: str,
    here: MeasureHere,
    progress: Progress | None = None,
) -> tuple[Deployment, BenchmarkResult]:
    """`Backend.benchmark` for a backend whose endpoints this machine reaches: each attempt measures the
    deployment's endpoints as they are then (a relaunch may move them)."""

    def attempt_on(current: Deployment, attempt: int) -> BenchmarkResult:
        now = spec if attempt == 1 else spec.remainder(here.answered(benchmark_id))  # what was answered is kept
        result = here.measure(now.model_copy(update={"endpoints": current.endpoints}), benchmark_id, attempt)
        # Requests to a vanished server fail one by one and the run still ends: ask whether the node went away.
        if backend.status(current).state == "preempted":
            raise CutShort(f"deployment {current.id} was preempted during attempt {attempt}")
        return result

    def on_cut(current: Deployment, attempt: int) -> str:
        return here.cut_short(benchmark_id, attempt)

    return benchmark_with_recovery(backend, deployment, attempt_on, on_cut, progress)


class BenchmarksFromHere:
    """`Backend.benchmark` for a backend whose endpoints this machine reaches (local twins, Kubernetes Services):
    every attempt is measured from here, under `benchmark_from_here`'s preemption recovery."""

    def benchmark(
        self,
        deployment: Deployment,
        spec: BenchmarkSpec,
        benchmark_id: str,
        here: MeasureHere,
        progress: Progress | None = None,
    ) -> tuple[Deployment, BenchmarkResult]:
        return benchmark_from_here(cast(Backend, self), deployment, spec, benchmark_id, here, progress)


def node_gpu_count(deployment: Deployment) -> int:
    """GPUs of the node a deployment holds: its offer's shape, else what its plan uses."""
    return deployment.offer.gpu_count if deployment.offer else deployment.plan.gpus


def replan_target(deployment: Deployment, plan: str) -> Plan:
    """The new plan, checked before anything stops: the deployment is live and the plan fits the node it holds."""
    if not deployment.alive:
        raise InvalidInput("deployment_id", deployment.id, "a live deployment", f"it is {deployment.state}")
    new = Plan.parse(plan)
    gpus = node_gpu_count(deployment)
    if new.gpus > gpus:
        raise InvalidInput(
            "plan",
            plan,
            f"a plan of at most {gpus} GPUs (the node deployment {deployment.id} holds)",
            f"it uses {new.gpus}; a larger plan needs a new deployment",
        )
    return new


def replanned(deployment: Deployment, plan: Plan) -> Deployment:
    """The deployment as it restarts under `plan`: same id, node, owner and commitment; the old plan remembered."""
    return deployment.model_copy(
        update={
            "plan": plan,  # model_copy does not validate: the word itself, never its string
            "previous_plans": [*deployment.previous_plans, str(deployment.plan)],
            "replanned_at": time.time(),
            "state": "loading",
            "ready_at": None,
            "endpoints": [],
        }
    )
