"""Deploy: start, look up, list and tear down deployments on any infra (the capability the MCP server exposes).

Public API (plain, typed, pydantic out; the MCP server and the agent call these):

    quote_deploy(request: DeployRequest, store=None, action="deploy") -> SpendQuote   # checks, starts nothing
    with_profile_for(request, origin) -> DeployRequest   # its twin_profiles list resolved to the one for its GPU
    deploy(request: DeployRequest, store=None, progress=None, profile_origin="cli", backend=None,
           deployment_id=None) -> Deployment
    get_deployment(deployment_id, store=None, refresh=True) -> Deployment
    list_deployments(run_id=None, alive_only=False, store=None) -> list[Deployment]
    teardown(deployment_id, store=None) -> Deployment
    backend_for(infra, store, options=None) -> Backend
    deploy_for_caller(caller_gone, request, store=None, progress=None, profile_origin="cli") -> Deployment
        # torn down if the caller went away

The backend is chosen by infra from the one table of backends (tools/backends/registry.py): "local" ->
LocalBackend (twin processes here); "slurm/<name>" and SkyPilot clouds -> worldtune.sky.backend.SkyPilotBackend;
"kubernetes" -> worldtune.sky.kubernetes.KubernetesBackend (each imported only when used). Input is checked before
anything starts, by the one set of deploy checks (tools/deployments/checks.py, which `worldtune deploy --dry-run` uses
too: the plan valid for the GPU and model by vLLM-Omni's rules and memory, what the infra cannot do such as vllm-omni on
infra local), and the commitment must fit the budget guardrails (tools/plans/spend.py), whoever calls: CLI, MCP, agent
or Python.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, cast

from worldtune.tools.backends import registry as backends
from worldtune.tools.deployments.checks import check_deploy_inputs
from worldtune.tools.plans.profile_paths import allowed_profile_path
from worldtune.tools.plans.spend import SpendQuote, check_commitment, quote, reference_offer
from worldtune.tools.store.database import Store
from worldtune.tools.words.deploy_request import DeployRequest
from worldtune.tools.words.deployment import Backend, Deployment, Progress, new_deployment_id
from worldtune.tools.words.errors import InvalidInput, WorldtuneError
from worldtune.tools.words.infra import Infra
from worldtune.tools.words.profile import Profile


def infra_kind(infra: str | Infra) -> str:
    """'local', 'kubernetes', 'slurm' or 'cloud' (Infra.parse: a malformed infra is refused)."""
    return Infra.parse(infra).kind


def backend_for(infra: str | Infra, store: Store, options: Any = None) -> Backend:
    """The Backend that hosts deployments on `infra` (SkyPilot and Kubernetes imported lazily).

    `options`: how SkyPilot or Kubernetes renders (sky's RenderOptions or K8sOptions; None: the infra's defaults).
    Either way the backend renders with the model's numbers for each deployment (the start-up allowance from the
    predicted cold load, SkyServe's target from the predicted service time): tools/deployments/preview.py."""
    kind = infra_kind(infra)
    module_name, class_name = backends.backend_named(kind)
    try:
        backend_class = backends.backend_class(kind)
    except (ImportError, AttributeError) as exc:
        raise InvalidInput(
            "infra",
            infra,
            f"an infra whose backend ({module_name}.{class_name}) is installed",
            f"it could not be imported: {exc}; infra local runs the twin engine without it",
        ) from exc
    if kind == "local":
        return cast(Backend, backend_class(store))
    from worldtune.tools.deployments import preview as deploy_preview

    predicted = deploy_preview.k8s_options if kind == "kubernetes" else deploy_preview.render_options
    try:
        backend: Backend = backend_class(store, options, predicted=predicted)
    except Exception as exc:  # e.g. no kubeconfig, no SkyPilot home: say which infra and why, start nothing
        raise InvalidInput("infra", infra, f"an infra {class_name} can reach", f"{type(exc).__name__}: {exc}") from exc
    return backend


def quote_deploy(request: DeployRequest, store: Store | None = None, action: str = "deploy") -> SpendQuote:
    """What `deploy` of this request would commit, refused now if a guardrail would refuse it then.

    Checks every input deploy checks (tools/deployments/checks.py, the same checks as `worldtune deploy --dry-run`'s
    build_deployment: engine, capacity and infra, what the infra cannot do, the plan against vLLM-Omni's rules and
    memory) and the commitment against the guardrails, counting every live deployment in the Store.
    """
    store = store or Store()
    r = request
    if r.twin_profiles:
        raise InvalidInput("twin_profiles", r.twin_profiles, "one twin_profile (with_profile_for picks it)")
    inputs = check_deploy_inputs(
        r.gpu, r.plan, r.infra, r.engine, r.capacity, r.model, r.time_scale, r.twin_profile, r.noise_seed
    )
    spend = quote(
        action,
        inputs.gpu.name,
        inputs.plan,
        infra=str(inputs.infra),
        capacity=r.capacity,
        model=inputs.model.key,
        hours=r.hours,
        usd_per_hour=r.usd_per_hour,
    )
    check_commitment(spend, store.list_deployments(), r.run_id)
    return spend


def with_profile_for(request: DeployRequest, origin: str) -> DeployRequest:
    """The request with its `twin_profiles` list resolved to the one profile the twin serves: the first one for the
    request's GPU type (one for another GPU type is passed over), else none (the shipped profile)."""
    if not request.twin_profiles:
        return request
    if request.twin_profile:
        raise InvalidInput("twin_profiles", request.twin_profiles, "either twin_profile or twin_profiles, not both")
    from worldtune.tools.plans.profile_paths import profile_for_gpu

    chosen = profile_for_gpu(request.twin_profiles, request.gpu, origin)
    return request.model_copy(update={"twin_profile": chosen, "twin_profiles": []})


def deploy(
    request: DeployRequest,
    store: Store | None = None,
    progress: Progress | None = None,
    profile_origin: str = "cli",
    backend: Backend | None = None,
    deployment_id: str | None = None,
) -> Deployment:
    """Start `request.plan` on `request.gpu` under its engine on its infra; return the deployment once ready (or
    raise).

    Bound by the guardrails whoever calls it: the commitment (price x (provisioning + load + hours)) is
    checked against the per-action, per-run and everything-live caps and recorded in the same database
    transaction, before anything starts. Local twins cost nothing (usd_per_hour 0); `offer` still names
    the node the plan would rent, so cost per clip can be computed from a rehearsal. The request's twin profile
    passes the profile allow-list for `profile_origin` (a remote MCP client may only name a profile). `backend`:
    one the caller configured (the CLI's render options); else the infra's default.
    """
    store = store or Store()
    request = with_profile_for(request, profile_origin)
    spend = quote_deploy(request, store)
    twin_profile, run_id = request.twin_profile, request.run_id
    where = Infra.parse(spend.infra)
    truth_path = None
    if twin_profile:
        truth_path = allowed_profile_path(twin_profile, profile_origin, "twin_profile")
        truth = Profile.load(truth_path, field="twin_profile")
        if truth.gpu.lower() != spend.gpu.lower():
            raise InvalidInput("twin_profile", twin_profile, f"a profile for {spend.gpu}", f"it is for {truth.gpu}")
    offer = spend.offer or reference_offer(spend.gpu, spend.plan, request.capacity)
    deployment = Deployment(
        id=deployment_id or new_deployment_id(),
        run_id=run_id,
        model=spend.model,
        gpu=spend.gpu,
        plan=spend.plan,
        infra=str(where),
        engine="twin" if request.engine == "twin" else "vllm-omni",
        capacity=request.capacity,
        offer=offer,
        usd_per_hour=spend.usd_per_hour,
        hold_hours=spend.hold_hours,
        committed_usd=spend.expected_usd,
        twin_profile=str(truth_path) if truth_path else None,
        time_scale=float(request.time_scale),
        noise_seed=request.noise_seed,
        guardrails=request.guardrails,
        state="pending",
    )
    host = backend or backend_for(str(where), store)
    # checked again inside the write lock: another caller may have committed since the quote
    store.reserve_deployment(deployment, lambda stored: check_commitment(spend, stored, run_id))
    try:
        return host.launch(deployment, progress)
    except Exception:
        # A launch that failed must not keep counting as committed, nor leave what it had started running:
        # stop it through its backend first (which finds its processes or cluster from the record's detail,
        # so the detail is kept), then record it failed. Backends that said so themselves win.
        tear_down_failed_start(store, host, deployment)
        raise


def _find(deployment_id: str, store: Store) -> Deployment:
    found = store.get_deployment(deployment_id)
    if found is None:
        known = [d.id for d in store.list_deployments()][-10:]
        raise InvalidInput(
            "deployment_id", deployment_id, "an id returned by deploy", f"known: {', '.join(known) or 'none'}"
        )
    return found


# the last status answer per deployment: (when, the stored record it answered for, the answer), in this process
_answered: dict[str, tuple[float, str, Deployment]] = {}
_answered_lock = threading.Lock()


def get_deployment(deployment_id: str, store: Store | None = None, refresh: bool = True) -> Deployment:
    """One deployment; when alive and `refresh`, its state is checked with its backend first. A check younger than
    the backend's `status_fresh_s`, for the same stored record, answers again (an agent asks every few seconds)."""
    store = store or Store()
    found = _find(deployment_id, store)
    if not (refresh and found.alive and found.state != "pending"):
        return found
    backend = backend_for(found.infra, store)
    if backend.status_fresh_s <= 0:  # asking is cheap: nothing to remember
        return backend.status(found)
    record = found.model_dump_json()
    with _answered_lock:
        last = _answered.get(found.id)
    if last is not None and last[1] == record and time.monotonic() - last[0] < backend.status_fresh_s:
        return last[2]
    answer = backend.status(found)
    with _answered_lock:
        _answered[found.id] = (time.monotonic(), record, answer)
    return answer


def list_deployments(
    run_id: str | None = None, alive_only: bool = False, store: Store | None = None
) -> list[Deployment]:
    """Deployments in the Store, oldest first (states as last recorded)."""
    return (store or Store()).list_deployments(run_id=run_id, alive_only=alive_only)


def teardown(deployment_id: str, store: Store | None = None) -> Deployment:
    """Stop everything a deployment started and mark it terminated; calling it again is harmless."""
    store = store or Store()
    found = _find(deployment_id, store)
    gone = backend_for(found.infra, store).teardown(found)
    store.save_deployment(gone)  # the SkyPilot backend returns the terminated word without storing it
    return gone


class CallerGone(WorldtuneError):
    """The caller of a deploy went away before it was ready; what had started was torn down."""


def deploy_for_caller(
    caller_gone: threading.Event,
    request: DeployRequest,
    store: Store | None = None,
    progress: Progress | None = None,
    profile_origin: str = "cli",
) -> Deployment:
    """deploy(), for a caller that may go away (an MCP client that timed out, cancelled or disconnected).

    Once `caller_gone` is set the launch is abandoned at its next progress report, or torn down as soon
    as it is ready: nobody holds the id of such a deployment, so it must not stay up (and bill).
    """
    store = store or Store()
    deployment_id = new_deployment_id()

    def report(message: str, fraction: float | None) -> None:
        if caller_gone.is_set():
            raise CallerGone(f"deployment {deployment_id}: the caller went away while it was starting")
        if progress is not None:
            progress(message, fraction)

    try:
        ready = deploy(request, store, report, profile_origin, deployment_id=deployment_id)
    except BaseException:
        if caller_gone.is_set() and store.get_deployment(deployment_id) is not None:
            with contextlib.suppress(Exception):  # the launch's own error is the one to report
                teardown(deployment_id, store)
        raise
    if caller_gone.is_set():
        teardown(deployment_id, store)
        raise CallerGone(f"deployment {deployment_id} came up after its caller went away: torn down")
    return ready


def tear_down_failed_start(store: Store, host: Backend, deployment: Deployment) -> None:
    """After a launch or replan raised: stop what it left running through its backend, then record it failed.

    The record is re-read first (a backend that already said so wins); the caller re-raises the start's own
    error, so a teardown that fails too is not reported over it.
    """
    current = store.get_deployment(deployment.id) or deployment
    if current.alive:
        with contextlib.suppress(Exception):
            current = host.teardown(current)
        store.save_deployment(
            current.model_copy(update={"state": "failed", "terminated_at": current.terminated_at or time.time()})
        )
