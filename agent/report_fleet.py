"""The report's fleet section: the simulated day of the chosen fleet (replicas, queue, latency over time) and
its rehearsal on twins, for a run whose goal had traffic (agent/fleet_step.py put it in the run's summary)."""

from __future__ import annotations

import html
from pathlib import Path

from worldtune.tools.deployments.capacity import CapacityPlan, FleetChoice
from worldtune.tools.deployments.fleet_rehearsal import FleetOutcome
from worldtune.tools.words.run_summary import RunSummary


def fleet_of(record: RunSummary) -> FleetOutcome | None:
    """The record's fleet as words (agent/fleet_step.py wrote it); None for a run without one."""
    return FleetOutcome.model_validate(record.fleet) if record.fleet else None


def chosen_day(fleet: FleetOutcome | None) -> tuple[CapacityPlan, FleetChoice] | None:
    """(the fleet's capacity plan, its chosen fleet with a simulated day and timeline); None when there is none to
    draw."""
    if fleet is None:
        return None
    plan = fleet.capacity
    if plan.chosen is None or not plan.chosen.day.timeline:
        return None
    return plan, plan.chosen


def write_fleet_day(fleet: FleetOutcome | None, path: Path) -> bool:
    """Three panels over the simulated day: nodes billed and ready, requests queued, each request's end-to-end
    latency at its arrival against the bound. False (nothing written) without a fleet."""
    found = chosen_day(fleet)
    if found is None:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    cap, chosen = found
    day = chosen.day
    hours = [s.t_s / 3600 for s in day.timeline]
    fig, (nodes, queue, latency) = plt.subplots(3, 1, figsize=(9, 7.5), dpi=110, sharex=True)
    nodes.step(hours, [s.nodes for s in day.timeline], where="post", label="nodes billed", c="#1f77b4")
    nodes.step(hours, [s.ready for s in day.timeline], where="post", label="nodes ready", c="#2ca02c", ls="--")
    nodes.set_ylabel("nodes")
    nodes.yaxis.set_major_locator(MaxNLocator(integer=True))
    nodes.legend(fontsize=8, loc="upper left")
    queue.step(hours, [s.queued for s in day.timeline], where="post", c="#ff7f0e")
    queue.set_ylabel("requests queued")
    answers = day.answers
    latency.scatter([a / 3600 for a, _ in answers], [e for _, e in answers], s=6, c="#555555", label="each request")
    if cap.bound_s:
        latency.axhline(cap.bound_s, ls="--", c="#d62828", lw=0.8, label=f"p{cap.percentile} bound")
    latency.set_ylabel("end to end (s)")
    latency.set_xlabel("hour of the simulated day")
    latency.legend(fontsize=8, loc="upper left")
    for ax in (nodes, queue, latency):
        ax.grid(alpha=0.3)
    f, auto = chosen.fleet, chosen.fleet.autoscaler
    fig.suptitle(
        f"SIMULATED day (seed {day.seed}): {f.plan} x{f.servers_per_node}/node on {f.offer_id} ({f.capacity}), "
        f"{auto.policy} {auto.min_replicas}-{auto.max_replicas}; ${day.cost_usd:.2f}, {day.arrivals} requests",
        fontsize=8,
    )
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def fleet_html(fleet: FleetOutcome | None) -> str:
    """The fleet's lines (the console's, agent/fleet_step.fleet_lines) as an HTML section; empty without one."""
    if fleet is None:
        return ""
    from worldtune.agent.fleet_step import fleet_lines

    items = "".join(f"<li>{html.escape(line.strip())}</li>" for line in fleet_lines(fleet))
    return f"<h2>Fleet for the goal's traffic</h2><ul>{items}</ul>"
