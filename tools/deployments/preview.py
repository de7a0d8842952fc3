"""The deploy capability's first half: check the inputs (tools/deployments/checks.py, the same checks a real deploy's
quote makes), pick the offer the quote prices, and render what a deploy would apply with the model's numbers (the
start-up allowance from the predicted cold load, SkyServe's target from the predicted service time). `worldtune
deploy` (dry run or not), the MCP tools and the tests all come through here; sky/ renders a Deployment it is given
with the numbers it is given and imports only the words.

    build_deployment(gpu, plan, model, infra, engine, capacity, ...) -> Deployment    # checked, pending
    pick_offer(gpu, plan, capacity, infra) -> Offer | None                            # the node the quote prices
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
from worldtune.tools.deployments.checks import check_deploy_inputs
from worldtune.tools.plans.estimate import estimate_plan, resolve_profile
from worldtune.tools.plans.spend import peak_usd_per_hour, reference_offer, rented_offer
from worldtune.tools.words.deployment import Deployment
from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.infra import Infra
from worldtune.tools.words.models import get_model
from worldtune.tools.words.offer import Offer
from worldtune.tools.words.plan import Plan
from worldtune.tools.words.workload import anchor_workload

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
    """The node a deployment on that cloud (and region) rents; for serverless one SkyServe replica's node
    (tools/plans/spend.py rented_offer: the quote prices the same node); None off a cloud."""
    return rented_offer(gpu, plan, capacity, Infra.parse(infra))


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
    guardrails: bool = False,
) -> Deployment:
    """A pending Deployment after the deploy capability's checks (tools/deployments/checks.py, the same as a real
    deploy's), on the offer the spend quote prices: at its peak for serverless (every replica's node up)."""
    inputs = check_deploy_inputs(gpu, plan, infra, engine, capacity, model, time_scale, twin_profile)
    offer = pick_offer(inputs.gpu.name, inputs.plan, capacity, str(inputs.infra))
    return Deployment(
        run_id=run_id,
        model=inputs.model.key,
        gpu=inputs.gpu.name,
        plan=str(inputs.plan),
        infra=str(inputs.infra),
        engine="twin" if inputs.engine == "twin" else "vllm-omni",
        capacity=capacity,
        offer=offer,
        usd_per_hour=peak_usd_per_hour(offer, inputs.plan, capacity) if offer else 0.0,
        time_scale=inputs.time_scale,
        twin_profile=twin_profile,
        guardrails=guardrails,
    )


def predicted_cold_load_s(gpu: str, model: str) -> float:
    """The model's load from disk on a GPU type, as its calibrated profile predicts (what the start-up allowance,
    twice it, and SkyServe's cold start are made of)."""
    return resolve_profile(gpu).load_time_s(get_model(model).weights_gib_bf16, cold=True)


def deployment_cold_load_s(deployment: Deployment) -> float:
    """predicted_cold_load_s for the deployment's GPU type and model (what a backend is given to wait by), plus the
    guardrails' start-up when the deployment runs them."""
    guard = resolve_profile(deployment.gpu).guardrail_startup_s if deployment.guardrails else 0.0
    return predicted_cold_load_s(deployment.gpu, deployment.model) + guard


def predicted_service_s(deployment: Deployment) -> float:
    """Seconds one replica spends per request on the anchor workload, as the model predicts."""
    plan = deployment.plan.single_replica()
    found = estimate_plan(anchor_workload(deployment.model), deployment.gpu, plan, resolve_profile(deployment.gpu))
    if not found.valid or not found.latency_s:
        raise InvalidInput(
            "plan", str(deployment.plan), f"a plan with a predicted latency on {deployment.gpu}", found.reason
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
        reference = reference_offer(deployment.gpu, deployment.plan, deployment.capacity)
    opts = render_options(deployment, options)
    return preview_deploy(deployment, opts, k8s_options=kube, optimize=optimize, reference_offer=reference)
