"""Deploy: start, look up, list and tear down deployments on any infra (the capability the MCP server exposes).

Public API (plain, typed, pydantic out; the MCP server and the agent call these):

    deploy(gpu, plan, infra="local", engine="twin", capacity="on-demand", model="cosmos3-super",
           twin_profile=None, time_scale=1.0, run_id=None, store=None, progress=None) -> Deployment
    get_deployment(deployment_id, store=None, refresh=True) -> Deployment
    list_deployments(run_id=None, alive_only=False, store=None) -> list[Deployment]
    teardown(deployment_id, store=None) -> Deployment
    backend_for(infra, store) -> Backend
    deploy_for_caller(caller_gone, **deploy_arguments) -> Deployment   # torn down if the caller went away

The backend is chosen by infra: "local" -> LocalBackend (twin processes here); "slurm/<name>" and SkyPilot
clouds -> worldtune.sky.backend.SkyPilotBackend; "kubernetes" -> worldtune.sky.kubernetes.KubernetesBackend
(both imported only when used). Input is checked before anything starts: the plan must be valid for the
GPU and model (vLLM-Omni's rules and memory), and vllm-omni cannot run on infra local (no GPU here).
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from pathlib import Path
from typing import Any

from worldtune.tools.deployment import ENGINES, Backend, Deployment, Progress, new_deployment_id
from worldtune.tools.errors import InvalidInput, WorldtuneError, one_of
from worldtune.tools.estimate import estimate_plan, resolve_profile
from worldtune.tools.gpus import get_gpu
from worldtune.tools.models import get_model
from worldtune.tools.offer import CAPACITIES, Offer
from worldtune.tools.offers import cheapest_fitting_offer
from worldtune.tools.plan import Plan
from worldtune.tools.profile import Profile
from worldtune.tools.store import Store
from worldtune.tools.workload import anchor_workload

SKY_BACKEND = ("worldtune.sky.backend", "SkyPilotBackend")
K8S_BACKEND = ("worldtune.sky.kubernetes", "KubernetesBackend")


def infra_kind(infra: str) -> str:
    """'local', 'kubernetes', 'slurm' or 'cloud'."""
    name = infra.strip().lower()
    if name == "local":
        return "local"
    if name in ("kubernetes", "k8s"):
        return "kubernetes"
    if name.startswith("slurm/"):
        return "slurm"
    if name == "slurm":
        raise InvalidInput("infra", infra, "slurm/<cluster name>", "e.g. slurm/localcluster")
    return "cloud"


def backend_for(infra: str, store: Store) -> Backend:
    """The Backend that hosts deployments on `infra` (SkyPilot and Kubernetes imported lazily)."""
    kind = infra_kind(infra)
    if kind == "local":
        from worldtune.tools.local_backend import LocalBackend

        return LocalBackend(store)
    module_name, class_name = K8S_BACKEND if kind == "kubernetes" else SKY_BACKEND
    try:
        module = importlib.import_module(module_name)
        backend_class = getattr(module, class_name)
    except (ImportError, AttributeError) as exc:
        raise InvalidInput(
            "infra", infra, f"an infra whose backend ({module_name}.{class_name}) is installed",
            f"it could not be imported: {exc}; infra local runs the twin engine without it",
        ) from exc  # fmt: skip
    try:
        backend: Backend = backend_class(store)
    except Exception as exc:  # e.g. no kubeconfig, no SkyPilot home: say which infra and why, start nothing
        raise InvalidInput("infra", infra, f"an infra {class_name} can reach", f"{type(exc).__name__}: {exc}") from exc
    return backend


def _offer_for(gpu: str, plan: Plan, infra: str, capacity: str) -> Offer | None:
    """The cheapest node big enough for the plan (on that infra, unless local, which is priced as anywhere)."""
    infras = None if infra_kind(infra) == "local" else [infra.lower()]
    return cheapest_fitting_offer(gpu, plan.gpus, capacity=[capacity], infra=infras)


def deploy(
    gpu: str,
    plan: str,
    infra: str = "local",
    engine: str = "twin",
    capacity: str = "on-demand",
    model: str = "cosmos3-super",
    twin_profile: str | None = None,
    time_scale: float = 1.0,
    run_id: str | None = None,
    store: Store | None = None,
    progress: Progress | None = None,
    deployment_id: str | None = None,
) -> Deployment:
    """Start `plan` on `gpu` under `engine` on `infra`; return the deployment once ready (or raise).

    Local twins cost nothing (usd_per_hour 0); `offer` still names the node the plan would rent, so
    cost per clip can be computed from a rehearsal.
    """
    store = store or Store()
    spec = get_gpu(gpu)
    model_spec = get_model(model)
    parsed = Plan.parse(plan)
    if engine not in ENGINES:
        raise one_of("engine", engine, ENGINES)
    if capacity not in CAPACITIES:
        raise one_of("capacity", capacity, CAPACITIES)
    if not time_scale > 0:
        raise InvalidInput("time_scale", time_scale, "a positive number (sleeps are divided by it)")
    kind = infra_kind(infra)
    if kind == "local" and engine == "vllm-omni":
        raise InvalidInput(
            "engine", engine, "twin on infra local: this machine has no GPU",
            "use --infra slurm/NAME, kubernetes or a cloud for vllm-omni, or engine twin to rehearse here",
        )  # fmt: skip
    if engine == "vllm-omni" and (twin_profile or time_scale != 1.0):
        raise InvalidInput("twin_profile/time_scale", twin_profile or time_scale, "only with engine twin")
    profile: Profile = resolve_profile(spec.name)
    if twin_profile:
        if not Path(twin_profile).is_file():
            raise InvalidInput("twin_profile", twin_profile, "a readable profile YAML file")
        truth = Profile.load(twin_profile)
        if truth.gpu.lower() != spec.name.lower():
            raise InvalidInput("twin_profile", twin_profile, f"a profile for {spec.name}", f"it is for {truth.gpu}")
    verdict = estimate_plan(anchor_workload(model_spec.key), spec.name, parsed, profile)
    if not verdict.valid:
        hint = f"try {verdict.alternative}" if verdict.alternative else None
        raise InvalidInput("plan", plan, verdict.reason or "a plan vLLM-Omni accepts", hint)
    offer = _offer_for(spec.name, parsed, infra, capacity)
    deployment = Deployment(
        id=deployment_id or new_deployment_id(),
        run_id=run_id,
        model=model_spec.key,
        gpu=spec.name,
        plan=str(parsed),
        infra=infra.lower(),
        engine="twin" if engine == "twin" else "vllm-omni",
        capacity=capacity,
        offer=offer,
        usd_per_hour=0.0 if kind == "local" else (offer.usd_per_hour if offer else 0.0),
        twin_profile=str(Path(twin_profile).resolve()) if twin_profile else None,
        time_scale=time_scale,
        state="pending",
    )
    backend = backend_for(infra, store)
    store.save_deployment(deployment)
    return backend.launch(deployment, progress)


def _find(deployment_id: str, store: Store) -> Deployment:
    found = store.get_deployment(deployment_id)
    if found is None:
        known = [d.id for d in store.list_deployments()][-10:]
        raise InvalidInput(
            "deployment_id", deployment_id, "an id returned by deploy", f"known: {', '.join(known) or 'none'}"
        )
    return found


def get_deployment(deployment_id: str, store: Store | None = None, refresh: bool = True) -> Deployment:
    """One deployment; when alive and `refresh`, its state is checked with its backend first."""
    store = store or Store()
    found = _find(deployment_id, store)
    if refresh and found.alive and found.state != "pending":
        return backend_for(found.infra, store).status(found)
    return found


def list_deployments(
    run_id: str | None = None, alive_only: bool = False, store: Store | None = None
) -> list[Deployment]:
    """Deployments in the Store, oldest first (states as last recorded)."""
    return (store or Store()).list_deployments(run_id=run_id, alive_only=alive_only)


def teardown(deployment_id: str, store: Store | None = None) -> Deployment:
    """Stop everything a deployment started and mark it terminated; calling it again is harmless."""
    store = store or Store()
    found = _find(deployment_id, store)
    return backend_for(found.infra, store).teardown(found)


class CallerGone(WorldtuneError):
    """The caller of a deploy went away before it was ready; what had started was torn down."""


def deploy_for_caller(caller_gone: threading.Event, **arguments: Any) -> Deployment:
    """deploy(), for a caller that may go away (an MCP client that timed out, cancelled or disconnected).

    Once `caller_gone` is set the launch is abandoned at its next progress report, or torn down as soon
    as it is ready: nobody holds the id of such a deployment, so it must not stay up (and bill).
    """
    store: Store = arguments.pop("store", None) or Store()
    passed: Progress | None = arguments.pop("progress", None)
    deployment_id = new_deployment_id()

    def progress(message: str, fraction: float | None) -> None:
        if caller_gone.is_set():
            raise CallerGone(f"deployment {deployment_id}: the caller went away while it was starting")
        if passed is not None:
            passed(message, fraction)

    try:
        ready = deploy(**arguments, store=store, progress=progress, deployment_id=deployment_id)
    except BaseException:
        if caller_gone.is_set() and store.get_deployment(deployment_id) is not None:
            with contextlib.suppress(Exception):  # the launch's own error is the one to report
                teardown(deployment_id, store)
        raise
    if caller_gone.is_set():
        teardown(deployment_id, store)
        raise CallerGone(f"deployment {deployment_id} came up after its caller went away: torn down")
    return ready
