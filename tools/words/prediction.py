"""What the performance model says of a plan, as a word every room can read: its prediction (Estimate, with
the step's Breakdown) and whether vLLM-Omni would accept it (PlanCheck). Made by the estimate capability
(tools/plans/estimate.py); read by the search's frontier and goal checks (policies/pareto.py), the planners and the
MCP tools.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from worldtune.tools.words.offer import Offer
from worldtune.tools.words.plan import PlanField


class Breakdown(BaseModel):
    """Where one denoising step's time goes on one GPU of a replica (seconds per step): the performance model's
    own answer (policies/perf_model.step_breakdown), carried as it is in every Estimate."""

    model_config = ConfigDict(frozen=True)

    linear_s: float
    attention_s: float
    ulysses_s: float
    tp_s: float
    ring_s: float
    hsdp_s: float
    cfg_s: float
    overhead_s: float

    @property
    def compute_s(self) -> float:
        return self.linear_s + self.attention_s

    @property
    def comm_s(self) -> float:
        return self.ulysses_s + self.tp_s + self.ring_s + self.hsdp_s + self.cfg_s

    @property
    def total_s(self) -> float:
        return self.compute_s + self.comm_s + self.overhead_s


class Estimate(BaseModel):
    """The model's prediction for one plan on one GPU type, with the cheapest matching offer."""

    valid: bool
    reason: str = Field(description="why the plan is refused, or a warning / 'ok'")
    rule: str = ""
    alternative: str = ""
    model: str
    gpu: str
    plan: PlanField
    gpus: int = Field(description="GPUs the plan uses (replicas x world size)")
    world_size: int
    replicas: int
    steps: int
    latency_s: float | None = Field(
        default=None,
        description="a client's end-to-end seconds for one sync request (= client_s): what a benchmark "
        "measures and goals are judged on",
    )
    server_s: float | None = Field(
        default=None,
        description="the server's generation time (vLLM-Omni's stage time, X-Inference-Time-S): "
        "fixed_s + steps x per_step_s + guardrail_s",
    )
    client_s: float | None = Field(default=None, description="server_s + client_overhead_s")
    client_overhead_s: float | None = Field(
        default=None, description="a client's time beyond the server's: the API server's MP4 encode, request, transfer"
    )
    per_step_s: float | None = None
    fixed_s: float | None = Field(default=None, description="the server's fixed part: text encode, VAE decode, rest")
    guardrail_s: float | None = None
    service_s: float | None = Field(
        default=None,
        description="seconds a replica is busy per clip when requests queue: client_s less the part "
        "that overlaps the next request (the profile's pipelined_s)",
    )
    load_s: float | None = None
    memory_gib_per_gpu: float | None = None
    clips_per_hour_per_replica: float | None = None
    clips_per_hour_per_node: float | None = None
    usd_per_clip: float | None = None
    offer: Offer | None = None
    breakdown: Breakdown | None = None
    profile_source: str = ""
    latency_sigma: float | None = Field(
        default=None, description="relative one-sigma of the predicted latency under the profile's prior uncertainty"
    )
    latency_range_s: tuple[float, float] | None = Field(
        default=None, description="5th-95th percentile of the latency under that uncertainty (a model, not a measure)"
    )
    uncertainty_shares: dict[str, float] = Field(
        default_factory=dict, description="parameter -> share of the latency's variance it explains"
    )
    assumed_terms: list[str] = Field(default_factory=list, description="assumed parameters the latency rests on")
    relies_on_assumed: bool = Field(default=False, description="assumed terms explain >= 25% of the variance")
    unmeasured_families: list[str] = Field(
        default_factory=list,
        description="the plan's families (tensor parallel, FP8, a backend, ...) with no published measured cell on "
        "this GPU type: no measured cell of this family, so the prediction rests on the mechanisms and other fits",
    )


class PlanCheck(BaseModel):
    """Whether vLLM-Omni would accept a plan on a GPU type, and why not; the serve flags when it would."""

    valid: bool
    plan: PlanField = Field(description="the plan in its canonical spelling")
    model: str
    gpu: str
    rule: str = Field(description="the rule a refused plan breaks ('' when valid)")
    message: str = Field(description="'ok', a warning, or why it is refused with a valid alternative")
    alternative: str = Field(description="a nearby valid plan when refused")
    gpus: int
    world_size: int
    replicas: int
    serve_flags: list[str] = Field(description="vllm-omni serve flags of one replica")
