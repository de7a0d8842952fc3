"""The deploy capability's first half: check the inputs, pick the offer, and render what a deploy would apply with the
model's numbers (the start-up allowance from the predicted cold load, SkyServe's target from the predicted service
time). `worldtune deploy` (dry run or not), the MCP tools and the tests all come through here; sky/ renders a
Deployment it is given with the numbers it is given and imports only the words.

    build_deployment(gpu, plan, model, infra, engine, capacity, ...) -> Deployment    # checked, pending
    pick_offer(gpu, plan, capacity, infra) -> Offer | None                            # cheapest node on that cloud
    predicted_cold_load_s(gpu, model) -> float                                        # the calibrated profile's
    deployment_cold_load_s(deployment) -> float
    predicted_service_s(deployment) -> float                                          # one replica, anchor clip
    render_options(deployment, options=None, as_service=None) -> RenderOptions        # with those numbers filled in
    k8s_options(deployment, options=None) -> K8sOptions
    preview(deployment, options=None, k8s=None, optimize=True) -> DeployPreview       # sky/preview.py, filled in
"""

from __future__ import annotations

from worldtune.sky.k8s_manifests import K8sOptions
from worldtune.sky.preview import DeployPreview, preview_deploy
from worldtune.sky.replicas import RenderOptions
from worldtune.tools.deployment import ENGINES, Deployment
from worldtune.tools.errors import InvalidInput, one_of
from worldtune.tools.estimate import estimate_plan, resolve_profile
from worldtune.tools.gpus import get_gpu
from worldtune.tools.infra import Infra
from worldtune.tools.models import get_model
from worldtune.tools.offer import CAPACITIES, Offer
from worldtune.tools.offers import cheapest_fitting_offer
from worldtune.tools.plan import Plan
from worldtune.tools.workload import anchor_workload

__all__ = [
    "DeployPreview",
    "build_deployment",
    "deployment_cold_load_s",
    "k8s_options",
    "pick_offer",
    "predicted_cold_load_s",
    "predicted_service_s",
    "preview",
    "render_options",
]


def pick_offer(gpu: str, plan: Plan, capacity: str, infra: str) -> Offer | None:
    """The cheapest node big enough for the plan on that cloud (and region), for serverless one replica's node."""
    where = Infra.parse(infra)
    if where.kind != "cloud":
        return None
    need = plan.world_size if capacity == "serverless" else plan.gpus
    offer = cheapest_fitting_offer(gpu, need, capacity=[capacity], infra=[str(where)])
    if offer is None:
        raise InvalidInput(
            "infra", infra, f"an infra that rents {need}x{gpu} at capacity {capacity}", "see `worldtune plans`"
        )
    return offer


def build_deployment(
    gpu: str,
    plan: str,
    model: str = "cosmos3-super",
    infra: str = "nebius",
    engine: str = "vllm-omni",
    capacity: str = "on-demand",
    time_scale: float = 1.0,
    twin_profile: str | None = None,
    run_id: str | None = None,
) -> Deployment:
    """A pending Deployment after checking every input (the plan against vLLM-Omni's rules and memory)."""
    spec = get_gpu(gpu)
    get_model(model)
    if engine not in ENGINES:
        raise one_of("engine", engine, ENGINES)
    if capacity not in CAPACITIES:
        raise one_of("capacity", capacity, CAPACITIES)
    if not isinstance(infra, str) or infra != infra.strip() or " " in infra:
        raise InvalidInput("infra", infra, "local, slurm/NAME, kubernetes or a SkyPilot cloud such as nebius")
    where = Infra.parse(infra)
    infra = str(where)
    if where.kind == "slurm" and capacity != "on-demand":
        raise InvalidInput("capacity", capacity, "on-demand on Slurm (SkyPilot has no spot or SkyServe there)")
    if where.kind in ("local", "kubernetes") and capacity == "serverless":
        raise InvalidInput("capacity", capacity, f"on-demand or spot on {infra} (serverless is SkyServe)")
    parsed = Plan.parse(plan)
    verdict = estimate_plan(anchor_workload(model), spec.name, parsed, resolve_profile(spec.name))
    if not verdict.valid:
        raise InvalidInput("plan", plan, f"a plan vLLM-Omni accepts on {spec.name}", verdict.reason)
    offer = pick_offer(spec.name, parsed, capacity, infra)
    return Deployment(
        run_id=run_id,
        model=get_model(model).key,
        gpu=spec.name,
        plan=str(parsed),
        infra=infra,
        engine=engine,  # checked against ENGINES above
        capacity=capacity,
        offer=offer,
        usd_per_hour=offer.usd_per_hour if offer else 0.0,
        time_scale=time_scale,
        twin_profile=twin_profile,
    )


def predicted_cold_load_s(gpu: str, model: str) -> float:
    """The model's load from disk on a GPU type, as its calibrated profile predicts (what the start-up allowance,
    twice it, and SkyServe's cold start are made of)."""
    return resolve_profile(gpu).load_time_s(get_model(model).weights_gib_bf16, cold=True)


def deployment_cold_load_s(deployment: Deployment) -> float:
    """predicted_cold_load_s for the deployment's GPU type and model (what a backend is given to wait by)."""
    return predicted_cold_load_s(deployment.gpu, deployment.model)


def predicted_service_s(deployment: Deployment) -> float:
    """Seconds one replica spends per request on the anchor workload, as the model predicts."""
    plan = Plan.parse(deployment.plan).single_replica()
    found = estimate_plan(anchor_workload(deployment.model), deployment.gpu, plan, resolve_profile(deployment.gpu))
    if not found.valid or not found.latency_s:
        raise InvalidInput(
            "plan", deployment.plan, f"a plan with a predicted latency on {deployment.gpu}", found.reason
        )
    return float(found.latency_s)


def render_options(
    deployment: Deployment, options: RenderOptions | None = None, as_service: bool | None = None
) -> RenderOptions:
    """`options` (default: RenderOptions()) with the model's numbers where they are not given: the cold load (the
    start-up allowance) and, when it is rendered as a SkyServe service (`as_service`; default: when the deployment is
    serverless), one replica's service time (the service's target)."""
    opts = options or RenderOptions()
    update: dict[str, float] = {}
    if opts.cold_load_s is None:
        update["cold_load_s"] = deployment_cold_load_s(deployment)
    service = deployment.capacity == "serverless" if as_service is None else as_service
    if opts.service_time_s is None and service:
        update["service_time_s"] = predicted_service_s(deployment)
    return opts.model_copy(update=update) if update else opts


def k8s_options(deployment: Deployment, options: K8sOptions | None = None) -> K8sOptions:
    """`options` (default: K8sOptions()) with the model's cold load where it is not given (the startup probe)."""
    opts = options or K8sOptions()
    if opts.cold_load_s is not None:
        return opts
    return opts.model_copy(update={"cold_load_s": deployment_cold_load_s(deployment)})


def preview(
    deployment: Deployment,
    options: RenderOptions | None = None,
    k8s: K8sOptions | None = None,
    optimize: bool = True,
) -> DeployPreview:
    """What `deployment` would apply and cost (sky/preview.py), rendered with the model's numbers."""
    kube = reference = None
    if Infra.parse(deployment.infra).kind == "kubernetes":  # your own cluster: priced as the same node rented
        kube = k8s_options(deployment, k8s)
        gpus = Plan.parse(deployment.plan).gpus
        reference = cheapest_fitting_offer(deployment.gpu, gpus, capacity=[deployment.capacity])
    opts = render_options(deployment, options)
    return preview_deploy(deployment, opts, k8s_options=kube, optimize=optimize, reference_offer=reference)
