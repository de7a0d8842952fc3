"""After a tuning run whose goal has traffic: plan the fleet (simulated) and rehearse it open-loop on twins.

Kept out of the tuning graph: the graph finds and verifies one replica's plan; this step sizes a fleet of
plans for the goal's traffic (tools/capacity.py) and, on infra local with the twin, runs the chosen fleet's
warm nodes as twins under open-loop arrivals (tools/fleet_rehearsal.py), so `worldtune tune` ends with the
fleet, its predicted and measured percentile and its daily cost side by side.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from worldtune.tools.capacity import plan_capacity, skyserve_service_yaml
from worldtune.tools.fleet_rehearsal import rehearse_fleet
from worldtune.tools.goal import Goal
from worldtune.tools.store import Store

REHEARSAL_REQUESTS = 40


Progress = Callable[[str, dict[str, Any]], None]


def fleet_for(
    goal: Goal, infra: str, engine: str, time_scale: float, db_path: str | None, progress: Progress
) -> dict[str, Any] | None:
    """The capacity plan and (local twin only) its rehearsal, as JSON-ready data; None without traffic."""
    if goal.traffic is None:
        return None
    progress("fleet", {"note": f"planning a fleet for {goal.traffic.describe()} (simulated)"})
    planned = plan_capacity(goal)
    out: dict[str, Any] = {"capacity": planned.model_dump(mode="json"), "rehearsal": None}
    if planned.chosen is None:
        out["note"] = "no simulated fleet meets the end-to-end bound"
        return out
    out["skyserve_service_yaml"] = skyserve_service_yaml(planned.chosen.fleet, goal.workload.model)
    if infra != "local" or engine != "twin":
        out["note"] = "rehearsal runs on local twins only: not rehearsed"
        return out
    chosen = planned.chosen
    progress("fleet", {"note": f"rehearsing {chosen.fleet.describe()} on local twins, open loop"})
    rehearsal = rehearse_fleet(chosen.fleet, goal.traffic, goal.workload, chosen.daily_cost_usd,
                               requests=REHEARSAL_REQUESTS, time_scale=time_scale, store=Store(db_path))  # fmt: skip
    out["rehearsal"] = rehearsal.model_dump(mode="json")
    return out


def fleet_lines(fleet: dict[str, Any]) -> list[str]:
    """The fleet's summary for the console: chosen fleet, predicted vs measured percentile and daily cost."""
    cap = fleet["capacity"]
    chosen = cap.get("chosen")
    if chosen is None:
        return [f"fleet: {fleet.get('note', 'none found')}"]
    f, day = chosen["fleet"], chosen["day"]
    pct = cap["percentile"]
    auto = f["autoscaler"]
    lines = [
        f"fleet: {f['plan']} x{f['servers_per_node']} server(s)/node on {f['offer_id']} ({f['capacity']}), "
        f"{auto['policy']} {auto['min_replicas']}-{auto['max_replicas']} node(s)",
        f"  predicted (simulated): p{pct} {chosen['p_e2e_s']:.0f} s end to end (pessimistic "
        f"{chosen['p_e2e_pessimistic_s'] or float('nan'):.0f} s), ${chosen['daily_cost_usd']:.2f}/day, "
        f"{day['cold_starts']} cold starts, {day['preemptions']} preemptions on day 1",
    ]
    sky = cap.get("skyserve_default")
    if sky:
        lines.append(f"  SkyServe defaults, same plan: p{pct} {sky['p_e2e_s']:.0f} s, ${sky['daily_cost_usd']:.2f}/day"
                     f"{'' if sky['meets'] else ' (misses the bound)'}")  # fmt: skip
    r = fleet.get("rehearsal")
    if r:
        meas = "n/a" if r["measured_p_s"] is None else f"{r['measured_p_s']:.0f} s"
        lines.append(
            f"  rehearsal on twins ({r['answered']}/{r['requests']} answered, {r['servers']} servers, "
            f"K={r['time_scale']:g}): measured p{pct} {meas} vs predicted {r['predicted_p_s']:.0f} s for the same "
            f"fixed fleet; mean wait {r['measured_wait_mean_s'] or 0:.0f} s vs {r['predicted_wait_mean_s']:.0f} s"
        )
        lines.append(
            f"  daily cost: ${r['measured_daily_cost_usd']:.2f} billed at its warm size (24 h) vs "
            f"${r['predicted_daily_cost_usd']:.2f} predicted (simulated day)"
        )
        lines.append(f"  meets the bound on the twin: {r['meets']}")
    else:
        lines.append(f"  {fleet.get('note', 'not rehearsed')}")
    return lines
