"""After a tuning run whose goal has traffic: plan the fleet (simulated) and rehearse it open-loop on twins.

Kept out of the tuning graph: the graph finds and verifies one replica's plan; this step sizes a fleet of
plans for the goal's traffic (tools/deployments/capacity.py) and, on infra local with the twin, runs the chosen fleet's
warm nodes as twins under open-loop arrivals (the MCP tool rehearse_fleet over tools/deployments/fleet_rehearsal.py,
in-process over the run's database, or on the run's server with `--mcp-url`), so `worldtune tune` ends with the fleet,
its predicted and measured percentile and its daily cost side by side; the fleet goes into the run's record through
the MCP tool record_fleet. Planning (tools/deployments/capacity.py) is an offline simulation with no state: it runs
here.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from worldtune.agent.events import Events, FleetNote, tell
from worldtune.tools.deployments.capacity import CapacityPlan, FleetChoice, plan_capacity, skyserve_service_yaml
from worldtune.tools.deployments.fleet_rehearsal import FleetOutcome, FleetRehearsal, Replanned
from worldtune.tools.words.fleet import Fleet
from worldtune.tools.words.goal import Goal
from worldtune.tools.words.profile import Profile

REHEARSAL_REQUESTS = 40


def fleet_for(
    goal: Goal,
    infra: str,
    engine: str,
    time_scale: float,
    db_path: str | None,
    progress: Events,
    twin_profiles: list[str] | None = None,
    learned_profiles: dict[str, dict[str, Any]] | None = None,
    mcp_url: str | None = None,
    recommended: str | None = None,
) -> FleetOutcome | None:
    """The capacity plan and (local twin only) its rehearsal; None without traffic. The
    rehearsal's twins serve the first of `twin_profiles` the deploy accepts for the fleet's GPU type (as the
    tuning graph's deployments do), else the shipped profile. `learned_profiles` (the run's recalibrated
    profile per GPU type, as its summary keeps them) are what the fleet's service times are predicted with."""
    if goal.traffic is None:
        return None
    with _written(learned_profiles) as paths:
        learned = f", service times from the run's recalibrated {', '.join(sorted(paths))} profile" if paths else ""
        tell(progress, FleetNote(note=f"planning a fleet for {goal.traffic.describe()} (simulated{learned})"))
        planned = plan_capacity(goal, profile_paths=paths)
        if planned.chosen is None:
            return FleetOutcome(capacity=planned, note="no simulated fleet meets the end-to-end bound")
        out = FleetOutcome(
            capacity=planned,
            skyserve_service_yaml=skyserve_service_yaml(planned.chosen.fleet, goal.workload.model),
            differs=why_the_fleet_differs(planned, recommended)
            if recommended and planned.chosen.fleet.plan != recommended
            else None,
        )
        if infra != "local" or engine != "twin":
            out.note = "rehearsal runs on local twins only: not rehearsed"
            return out
        chosen = planned.chosen
        tell(progress, FleetNote(note=f"rehearsing {chosen.fleet.describe()} on local twins, open loop"))
        rehearsal = _rehearsed(goal, chosen, time_scale, db_path, twin_profiles, mcp_url)
        out.rehearsal = rehearsal
        if rehearsal.latency_disagrees():  # feed the measurement back: re-plan with that plan's measured latency
            measured = {(chosen.fleet.gpu, chosen.fleet.plan): float(rehearsal.measured_latency_mean_s or 0.0)}
            note = (
                f"the rehearsal measured {rehearsal.measured_latency_mean_s:.0f} s per request against the "
                f"model's {rehearsal.predicted_latency_s:.0f} s: re-planning with the measured one"
            )
            tell(progress, FleetNote(note=note))
            again = plan_capacity(goal, measured_latency_s=measured, profile_paths=paths)
            out.replanned = Replanned(
                capacity=again,
                same_fleet=again.chosen is not None and _shape(again.chosen.fleet) == _shape(chosen.fleet),
                basis="simulated, with the chosen plan's service time scaled to its rehearsal's measured mean "
                "latency; other plans keep the model's (not rehearsed)",
            )
        return out


def why_the_fleet_differs(planned: CapacityPlan, recommended: str) -> str:
    """Why the fleet's plan is not the verified recommendation's (issue 36: they name the same plan or say why)."""
    assert planned.chosen is not None
    chosen = planned.chosen
    same = [c for c in [chosen, *planned.runners_up] if c.fleet.plan == recommended]
    versus = (
        f"; its best fleet simulated costs ${min(c.daily_cost_usd for c in same):.2f}/day against "
        f"${chosen.daily_cost_usd:.2f}/day"
        if same
        else "; no fleet of it was among the cheapest simulated"
    )
    return (
        f"the fleet runs {chosen.fleet.plan}, not the recommended {recommended}: the recommendation is the cheapest "
        f"per clip verified one request at a time, the fleet the cheapest simulated day for this traffic (queueing, "
        f"replicas per node and idle nodes included){versus}"
    )


@contextlib.contextmanager
def _written(learned_profiles: dict[str, dict[str, Any]] | None) -> Iterator[dict[str, str]]:
    """GPU type -> a file holding its learned profile (plan_capacity reads profiles from paths), for the block."""
    with tempfile.TemporaryDirectory(prefix="worldtune-fleet-") as folder:
        paths = {}
        for gpu, data in (learned_profiles or {}).items():
            paths[gpu] = str(Path(folder) / f"{gpu}-learned.yaml")
            Profile.model_validate(data).dump(paths[gpu])
        yield paths


def _rehearsed(
    goal: Goal,
    chosen: FleetChoice,
    time_scale: float,
    db_path: str | None,
    twin_profiles: list[str] | None,
    mcp_url: str | None = None,
) -> FleetRehearsal:
    """The chosen fleet rehearsed on twins serving the first twin profile the deploy takes for its GPU type, through
    the MCP tool rehearse_fleet (its twins and samples are written to the run's database by the tools: the
    server's, on the server's machine, when the run is remote)."""
    from worldtune.agent.tools import connect

    async def call() -> FleetRehearsal:
        async with connect(db_path, mcp_url) as tools:
            return await tools.rehearse_fleet(
                goal.model_dump(mode="json"),
                chosen.fleet.model_dump(mode="json"),
                chosen.daily_cost_usd,
                twin_profiles or [],
                REHEARSAL_REQUESTS,
                time_scale,
            )

    return asyncio.run(call())


def record_fleet(run_id: str, fleet: FleetOutcome | None, db_path: str | None, mcp_url: str | None) -> None:
    """Put the fleet in the run's record (the report draws its day) through the MCP tool record_fleet, so a
    remote run's fleet is kept by its server, next to the rest of its record."""
    from worldtune.agent.tools import connect

    async def call() -> None:
        async with connect(db_path, mcp_url) as tools:
            await tools.record_fleet(run_id, fleet.model_dump(mode="json") if fleet else {})

    asyncio.run(call())


def _shape(fleet: Fleet) -> tuple[Any, ...]:
    """What a user rents and sets: plan, offer, capacity, servers per node, autoscaler, fallback (not the speed)."""
    return (
        fleet.plan,
        fleet.offer_id,
        fleet.capacity,
        fleet.servers_per_node,
        fleet.autoscaler,
        fleet.base_ondemand_fallback,
    )


def fleet_lines(fleet: FleetOutcome) -> list[str]:
    """The fleet's summary for the console: chosen fleet, predicted vs measured percentile and daily cost."""
    cap = fleet.capacity
    chosen = cap.chosen
    if chosen is None:
        return [f"fleet: {fleet.note or 'none found'}"]
    f, day, pct = chosen.fleet, chosen.day, cap.percentile
    auto = f.autoscaler
    lines = [
        f"fleet: {f.plan} x{f.servers_per_node} server(s)/node on {f.offer_id} ({f.capacity}), "
        f"{auto.policy} {auto.min_replicas}-{auto.max_replicas} node(s)",
        *([f"  {fleet.differs}"] if fleet.differs else []),
        f"  predicted (simulated): p{pct} {chosen.p_e2e_s:.0f} s end to end (pessimistic "
        f"{chosen.p_e2e_pessimistic_s or float('nan'):.0f} s), ${chosen.daily_cost_usd:.2f}/day, "
        f"{day.cold_starts} cold starts, {day.preemptions} preemptions on day 1",
    ]
    sky = cap.skyserve_default
    if sky:
        lines.append(
            f"  SkyServe defaults, same plan: p{pct} {sky.p_e2e_s:.0f} s, ${sky.daily_cost_usd:.2f}/day"
            f"{'' if sky.meets else ' (misses the bound)'}"
        )
    r = fleet.rehearsal
    if r:
        meas = "n/a" if r.measured_p_s is None else f"{r.measured_p_s:.0f} s"
        lines.append(
            f"  rehearsal on twins ({r.answered}/{r.requests} answered, {r.servers} servers, "
            f"K={r.time_scale:g}): measured p{pct} {meas} vs predicted {r.predicted_p_s or 0:.0f} s for the same "
            f"fixed fleet; mean wait {r.measured_wait_mean_s or 0:.0f} s vs {r.predicted_wait_mean_s or 0:.0f} s"
        )
        lines.append(
            f"  daily cost: ${r.measured_daily_cost_usd:.2f} billed at its warm size (24 h) vs "
            f"${r.predicted_daily_cost_usd:.2f} predicted (simulated day)"
        )
        lines.append(f"  meets the bound on the twin: {r.meets}")
        if r.measured_latency_mean_s is not None:
            sem = r.measured_latency_sem_s or 0.0
            lines.append(
                f"  per request: measured {r.measured_latency_mean_s:.1f} s (+-{sem:.1f}) "
                f"vs modelled {r.predicted_latency_s or 0:.1f} s"
            )
    else:
        lines.append(f"  {fleet.note or 'not rehearsed'}")
    return lines + _replanned_lines(fleet.replanned, pct)


def _replanned_lines(again: Replanned | None, pct: int) -> list[str]:
    """What re-planning with the rehearsal's measured latency gave (nothing when the two agreed)."""
    if not again:
        return []
    new = again.capacity.chosen
    if new is None:
        return ["  re-planned with the measured latency: no simulated fleet meets the bound"]
    if again.same_fleet:
        return [
            f"  re-planned with the measured latency: the same fleet still meets the bound, p{pct} "
            f"{new.p_e2e_s:.0f} s, ${new.daily_cost_usd:.2f}/day (simulated)"
        ]
    nf, auto = new.fleet, new.fleet.autoscaler
    return [
        f"  re-planned with the measured latency: {nf.plan} x{nf.servers_per_node}/node on {nf.offer_id} "
        f"({nf.capacity}), {auto.policy} {auto.min_replicas}-{auto.max_replicas} node(s), "
        f"p{pct} {new.p_e2e_s:.0f} s, ${new.daily_cost_usd:.2f}/day (simulated)"
    ]
