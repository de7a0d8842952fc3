"""Fleet policies: the day's cost of plan_capacity's fleet vs SkyServe's default autoscaling vs a fixed fleet
sized by hand from one clip's latency, at three traffic levels.

Everything is simulated (policies/fleet_sim.py over the performance model's service times, the offer
snapshot's prices, spot preemptions at the assumed 0.1 per node-hour); nothing is measured. Per level:
- worldtune: plan_capacity's chosen fleet (searched over plans, offers, capacities, replicas, autoscalers);
- SkyServe defaults: the same plan and offer with SkyServe's QPS autoscaler at its default delays
  (300 s up, 1200 s down), min 1 replica, target QPS = one node's saturation (1 / service time);
- by hand: the same plan on on-demand nodes, servers = ceil(rate x one clip's latency), fixed all day.
Each fleet is simulated on 4 seeded days; the table gives the mean daily cost and the pooled p95.

Run: .venv/bin/python benchmarks/fleet_policies.py  (writes benchmarks/results/fleet_policies.json)
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from worldtune.tools.deployments.capacity import CONFIRM_SEEDS, judge_fleet, plan_capacity
from worldtune.tools.plans.offers import cheapest_fitting_offer
from worldtune.tools.words.fleet import Autoscaler
from worldtune.tools.words.goal import Goal
from worldtune.tools.words.traffic import Traffic

sys.path.insert(0, str(Path(__file__).parent))  # the benchmarks' helpers, also when run by path
from _run_clock import stamped

LEVELS = (
    Traffic(shape="poisson", rate_per_hour=10, e2e_bound_s=600),
    Traffic(shape="poisson", rate_per_hour=40, e2e_bound_s=600),
    Traffic(shape="daily_window", clips_per_day=600, window_start_h=8, window_end_h=20, e2e_bound_s=600),
)
OUT = Path(__file__).parent / "results" / "fleet_policies.json"


def main() -> None:
    rows = []
    for traffic in LEVELS:
        t0 = time.monotonic()
        planned = plan_capacity(Goal(gpus=["H200"], capacities=["on-demand", "spot"], traffic=traffic))
        chosen, sky = planned.chosen, planned.skyserve_default
        assert chosen is not None and sky is not None
        f = chosen.fleet
        servers = math.ceil(traffic.peak_rate_per_hour * (f.latency_s or f.service_s) / 3600)
        nodes = max(1, math.ceil(servers / f.servers_per_node))
        demand = cheapest_fitting_offer(f.gpu, 1, capacity=["on-demand"])
        od = f.ondemand_usd_per_node_hour or (demand.usd_per_hour if demand else f.usd_per_node_hour)
        fixed = Autoscaler(policy="fixed", min_replicas=nodes, max_replicas=nodes)
        hand_fleet = f.model_copy(update={"autoscaler": fixed, "capacity": "on-demand", "usd_per_node_hour": od,
                                          "offer_id": f.offer_id.replace("/spot", "/on-demand"),
                                          "preemptions_per_node_hour": 0.0, "base_ondemand_fallback": 0})  # fmt: skip
        hand = judge_fleet(hand_fleet, traffic, (0, *CONFIRM_SEEDS), traffic.e2e_percentile, traffic.e2e_bound_s)
        for name, c in (("worldtune", chosen), ("SkyServe defaults", sky), ("fixed by hand", hand)):
            rows.append({"traffic": traffic.describe(), "policy": name, "fleet": c.fleet.describe(),
                         "daily_cost_usd": round(c.daily_cost_usd, 2), "p95_e2e_s": round(c.p_e2e_s, 1),
                         "meets": c.meets, "cold_starts_day1": c.day.cold_starts,
                         "node_hours_day1": round(c.day.node_hours, 2)})  # fmt: skip
        rows[-3]["search_s"] = round(time.monotonic() - t0, 1)
        rows[-3]["simulated_fleets"] = planned.simulated_fleets
    table = Table(title="Daily cost by fleet policy (simulated; bound p95 <= 600 s end to end)")
    for col in ("traffic", "policy", "fleet", "$/day", "p95 e2e s", "meets"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["traffic"].split(",")[0], r["policy"], r["fleet"], f"{r['daily_cost_usd']:.2f}",
                      f"{r['p95_e2e_s']:.0f}", str(r["meets"]))  # fmt: skip
    Console(width=200).print(table)
    OUT.write_text(json.dumps(stamped({
        "basis": "simulated: policies/fleet_sim.py over the performance model (predicted service times), offer "
                 "snapshot prices, spot preemptions assumed at 0.1 per node-hour; 4 seeded days per fleet",
        "rows": rows,
    }), indent=1) + "\n")  # fmt: skip
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
