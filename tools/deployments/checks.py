"""The deploy capability's one set of input checks: every way to deploy refuses the same inputs with the same message.

`check_deploy_inputs` is called by `quote_deploy` (tools/deployments/deploy.py: what `deploy`, the MCP tools deploy and
provision, the agent and a real `worldtune deploy` quote through) and by `build_deployment`
(tools/deployments/preview.py: what `worldtune deploy --dry-run` and the renderers build from), before anything is
started or spent. Each refusal is an InvalidInput naming the field, the value and what would be valid:

    gpu, model             known GPU types and models
    engine, capacity       one of ENGINES, one of CAPACITIES
    infra                  local, slurm/NAME, kubernetes or a SkyPilot cloud[/REGION], without spaces
    capacity on infra      Infra.capacities: Slurm on-demand only (SkyPilot has no spot or SkyServe there); no
                           serverless on Kubernetes (it is SkyServe); local twins rehearse any offer's capacity
    engine on infra        vllm-omni needs GPUs: not on infra local
    time_scale, twin_profile, noise_seed   a finite positive time scale; all three only with engine twin
    plan                   parsed, then valid for the GPU and model by vLLM-Omni's rules and memory

    check_deploy_inputs(gpu, plan, infra, engine, capacity, model, time_scale=1.0, twin_profile=None,
                        noise_seed=None) -> DeployInputs
"""

from __future__ import annotations

from dataclasses import dataclass

from worldtune.tools.plans.estimate import estimate_plan, resolve_profile
from worldtune.tools.plans.spend import finite
from worldtune.tools.words.deployment import ENGINES
from worldtune.tools.words.errors import InvalidInput, one_of
from worldtune.tools.words.gpus import GpuSpec, get_gpu
from worldtune.tools.words.infra import FORMS, Infra
from worldtune.tools.words.models import ModelSpec, get_model
from worldtune.tools.words.offer import CAPACITIES
from worldtune.tools.words.plan import Plan
from worldtune.tools.words.workload import anchor_workload

TIME_SCALE = "a positive number (sleeps are divided by it)"


@dataclass(frozen=True)
class DeployInputs:
    """A deploy's inputs once checked, as the words (the names the rest of the deploy uses)."""

    gpu: GpuSpec
    model: ModelSpec
    plan: Plan
    infra: Infra
    engine: str
    capacity: str
    time_scale: float


def _infra(infra: object) -> Infra:
    """The parsed infra; a string with spaces in it is refused (a typo, not a name)."""
    if isinstance(infra, str) and (infra != infra.strip() or " " in infra):
        raise InvalidInput("infra", infra, FORMS, "without spaces")
    return Infra.parse(infra)


# Where Infra.capacities leaves a capacity out, and why (local twins and clouds take every capacity).
CANNOT = {
    "slurm": ("Slurm", "SkyPilot has no spot or SkyServe there"),
    "kubernetes": ("Kubernetes", "serverless is SkyServe"),
}


def _fits_infra(where: Infra, engine: str, capacity: str) -> None:
    """What each kind of infra cannot do: spot or SkyServe on Slurm, serverless on Kubernetes, vLLM-Omni here."""
    if capacity not in where.capacities:
        place, why = CANNOT.get(where.kind, (str(where), "not offered there"))
        raise InvalidInput("capacity", capacity, f"{' or '.join(where.capacities)} on {place} ({why})")
    if where.is_local and engine == "vllm-omni":
        raise InvalidInput(
            "engine",
            engine,
            "twin on infra local: this machine has no GPU",
            "use --infra slurm/NAME, kubernetes or a cloud for vllm-omni, or engine twin to rehearse here",
        )


def _twin_only(engine: str, time_scale: float, twin_profile: str | None, noise_seed: int | None) -> float:
    """The time scale, checked: finite and positive; it, a twin profile and a noise seed are only for engine twin."""
    scale = finite("time_scale", time_scale, TIME_SCALE)
    if not scale > 0:
        raise InvalidInput("time_scale", time_scale, TIME_SCALE)
    if engine == "vllm-omni" and (twin_profile or scale != 1.0):
        raise InvalidInput("twin_profile/time_scale", twin_profile or time_scale, "only with engine twin")
    if engine == "vllm-omni" and noise_seed is not None:
        raise InvalidInput("noise_seed", noise_seed, "no noise_seed with engine vllm-omni (a twin's noise only)")
    return scale


def _valid_plan(plan: str, gpu: GpuSpec, model: ModelSpec) -> Plan:
    """The parsed plan, refused unless vLLM-Omni's rules and the GPU's memory accept it (with an alternative)."""
    parsed = Plan.parse(plan)
    verdict = estimate_plan(anchor_workload(model.key), gpu.name, parsed, resolve_profile(gpu.name))
    if not verdict.valid:
        why = [verdict.reason] if verdict.reason else []
        why += [f"try {verdict.alternative}"] if verdict.alternative else []
        raise InvalidInput("plan", plan, f"a plan vLLM-Omni accepts for {model.key} on {gpu.name}", "; ".join(why))
    return parsed


def check_deploy_inputs(
    gpu: str,
    plan: str,
    infra: str,
    engine: str,
    capacity: str,
    model: str = "cosmos3-super",
    time_scale: float = 1.0,
    twin_profile: str | None = None,
    noise_seed: int | None = None,
) -> DeployInputs:
    """Every check a deploy's inputs get, whoever deploys (dry run, real deploy, MCP, agent); the parsed words."""
    spec = get_gpu(gpu)
    model_spec = get_model(model)
    if engine not in ENGINES:
        raise one_of("engine", engine, ENGINES)
    if capacity not in CAPACITIES:
        raise one_of("capacity", capacity, CAPACITIES)
    where = _infra(infra)
    _fits_infra(where, engine, capacity)
    scale = _twin_only(engine, time_scale, twin_profile, noise_seed)
    parsed = _valid_plan(plan, spec, model_spec)
    return DeployInputs(spec, model_spec, parsed, where, engine, capacity, scale)
