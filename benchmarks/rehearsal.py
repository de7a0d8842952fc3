"""Rehearsal: does the search's verdict hold when the belief is wrong? Truths drawn around the belief.

Each truth perturbs every learnable mechanism of policies/belief.py (rates, each collective's bandwidth
and latency, ring/HSDP overlap, VAE patch efficiency, the fixed parts), on both GPU types, by a log-normal
draw of its prior sigma (Profile.uncertainty) within the physical bounds; prices by x exp(N(0, 0.25));
spot capacity is withdrawn in a third of them; the goal's p95 bound is the truth's fastest candidate x
U(0.92, 1.6) (so about one goal in six is infeasible; the search never sees the truth). The issue's two
named truths are added: (a) a2a_gbps 15 and ring_overlap 0 on H200, p95 < 180 s, H200 only, no spot,
$300; (b) vae_parallel_efficiency x0.05, p95 < 116 s, H200 (infeasible: the fastest is ~116.9 s); (c) issue 25's
5% run-to-run noise with a bound 3% above the best plan's calm p95 (infeasible under that noise); (d) issue 39's
slow cold loads: weights read from disk at 1/5 the belief's rate on both GPU types (a cold load of ~2,955 s against
a believed 623 s), p95 < 150 s, H200 or B200, spot ok; (e) issue 39's spot preemption: spot nodes taken back at
0.25 per node-hour (the search believes none), p95 < 150 s, H200 or B200, spot ok; (f) 3% noise near the bound; (g)
tensor parallel dearer than believed.
Measurements are simulated exactly as the twin serves them (perf_model.predict on the truth with seeded
noise of noise_cv; benchmarks/search_efficiency.py's Twin).
Strategies: worldtune (policies/search/__init__.py), grid (every candidate), random and Optuna TPE (full runs until
the budget). Per strategy: the regret distribution, the share that declared convergence with regret > 5%,
infeasible truths detected and their cost, GPU-hours against the grid's (every candidate on a fresh
deployment, as the issues count it), against a sweep's (the same grid keeping each offer's node for
its next plan: warm loads, one provisioning per offer, the stricter yardstick) and over an oracle's (one
provisioning, one load and the claim's run of the true best plan: the floor; median and p90 over the feasible
truths), and the modelled time to the verdict.
Every strategy is billed what the twin would bill: provisioning and a cold load on a new node, a warm
load of the plan on a node it keeps (worldtune keeps them as agent/graph.decide does).

Run: .venv/bin/python benchmarks/rehearsal.py [TRUTHS] [SEEDS]   (writes benchmarks/results/rehearsal.json)
     .venv/bin/python benchmarks/rehearsal.py --graph 3   (the real graph on the twin: rehearsal_graph.json)
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).parent))
import search_efficiency as se
from _run_clock import stamped

from worldtune.policies import belief, search
from worldtune.policies.calibration import shipped_profile
from worldtune.policies.search.lanes import DEFAULT_ANSWER_S
from worldtune.tools.plans.offers import all_offers
from worldtune.tools.words.goal import Goal
from worldtune.tools.words.profile import Profile
from worldtune.tools.words.workload import anchor_workload

RESULTS = Path(__file__).parent / "results" / "rehearsal.json"


def _goal(bound: float, gpus: list[str], spot: bool, budget: float = 300) -> Goal:
    return Goal(
        objective="min_cost_per_clip", workload=anchor_workload("cosmos3-super"), latency_bound_s=bound,
        latency_percentile=95, gpus=gpus, capacities=["on-demand", "spot"] if spot else ["on-demand"],
        budget_usd=budget,
    )  # fmt: skip


def perturbed(prior: Profile, rng: np.random.Generator) -> Profile:
    """A truth around the belief: every learnable coordinate moved by a draw of its prior sigma, within bounds."""
    post = belief.prior_posterior(prior)
    x = np.asarray(post.mean) + np.asarray(post.prior_sd) * rng.standard_normal(len(post.mean))
    x = np.clip(x, np.asarray(post.lower), np.asarray(post.upper))
    return post.profile(prior, x).model_copy(update={"source": "rehearsal truth (random draw around the belief)"})


NOISY_CV = 0.05  # issue 25: 25x the belief's assumed 0.002 (19x the measured 0.0026)
NOISY_MARGIN = 1.03  # the bound: 3% above the best plan's p95 as a calm truth (the measured noise) has it


def noisy_truth(shipped: dict[str, Profile], offers: list[Any]) -> tuple[se.Scenario, Goal]:
    """Issue 25's named truth: the shipped profiles with 5% run-to-run noise, and a p95 bound 3% above the best
    plan's p95 at the measured noise (H200 only, no spot, $300); under the noise no plan meets it: infeasible."""
    calm = se.Scenario("calm", shipped, offers, "")
    fastest = min(c.latency_q_s for c in se.truth_candidates(calm, _goal(1e9, ["H200"], spot=False)))
    noisy = {g: p.with_changes(noise_cv=NOISY_CV, source=f"truth: noise cv {NOISY_CV}") for g, p in shipped.items()}
    bound = float(round(fastest * NOISY_MARGIN))
    return (se.Scenario("named: 5% noise", noisy, offers, f"noise_cv {NOISY_CV}, p95<{bound:g} (infeasible)"),
            _goal(bound, ["H200"], spot=False))  # fmt: skip


NEAR_CV = 0.03  # issue 39 item 8: noise of 3-5% near the bound; 3% here, with a bound it meets with little room
NEAR_MARGIN = 1.06  # the bound: 6% above the best plan's p95 as a calm truth has it (3% noise adds ~5% to a p95)


def noisy_near_bound(shipped: dict[str, Profile], offers: list[Any]) -> tuple[se.Scenario, Goal]:
    """3% run-to-run noise and a p95 bound 6% above the best plan's calm p95 (H200 and B200, spot allowed): feasible,
    but a claim pooled over lanes must hold its percentile near the bound."""
    calm = se.Scenario("calm", shipped, offers, "")
    fastest = min(c.latency_q_s for c in se.truth_candidates(calm, _goal(1e9, ["H200", "B200"], spot=True)))
    noisy = {g: p.with_changes(noise_cv=NEAR_CV, source=f"truth: noise cv {NEAR_CV}") for g, p in shipped.items()}
    bound = float(round(fastest * NEAR_MARGIN))
    return (se.Scenario("named: 3% noise near the bound", noisy, offers, f"noise_cv {NEAR_CV}, p95<{bound:g}"),
            _goal(bound, ["H200", "B200"], spot=True))  # fmt: skip


def dearer_tp(shipped: dict[str, Profile], offers: list[Any]) -> tuple[se.Scenario, Goal]:
    """Tensor parallel dearer than believed: its all-reduce at a quarter of the bandwidth the belief has."""
    dear = {
        g: p.with_changes(allreduce_gbps=(p.allreduce_gbps or p.link_gbps) / 4, source="truth: dearer TP")
        for g, p in shipped.items()
    }
    return (se.Scenario("named: dearer TP", dear, offers, "all-reduce at 1/4 the belief's bandwidth"),
            _goal(150, ["H200", "B200"], spot=True))  # fmt: skip


PREEMPTIONS_PER_NODE_HOUR = 0.25  # one spot node in four taken back within its first hour (the belief has none)


def spot_preemption(shipped: dict[str, Profile], offers: list[Any]) -> tuple[se.Scenario, Goal]:
    """Issue 39 item 6: spot nodes taken back at 0.25 per node-hour (the twin's local backend does it at the truth
    profile's rate; the search believes the shipped 0), the main job's goal, spot allowed."""
    taken = {
        g: p.with_changes(spot_preemptions_per_node_hour=PREEMPTIONS_PER_NODE_HOUR, source="truth: spot preemption")
        for g, p in shipped.items()
    }
    return (se.Scenario("named: spot preemption", taken, offers, f"{PREEMPTIONS_PER_NODE_HOUR} per spot node-hour"),
            _goal(150, ["H200", "B200"], spot=True))  # fmt: skip


def truths(count: int, seed: int = 7) -> list[tuple[se.Scenario, Goal]]:
    rng = np.random.default_rng(seed)
    offers = [o for o in all_offers("snapshot") if o.capacity != "serverless"]
    shipped = {g: shipped_profile(g) for g in ("H200", "B200")}
    out: list[tuple[se.Scenario, Goal]] = []
    h200 = shipped["H200"]
    slow = h200.with_changes(a2a_gbps=15.0, ring_overlap=0.0, source="truth: slow all-to-all")
    out.append((se.Scenario("named: slow a2a", {**shipped, "H200": slow}, offers, "a2a 15 GB/s, ring_overlap 0"),
                _goal(180, ["H200"], spot=False)))  # fmt: skip
    vae = {g: p.with_changes(vae_parallel_efficiency=p.vae_parallel_efficiency * 0.05) for g, p in shipped.items()}
    out.append((se.Scenario("named: VAE PP helps little", vae, offers, "vae_parallel_efficiency x0.05"),
                _goal(116, ["H200"], spot=True)))  # fmt: skip
    out.append(noisy_truth(shipped, offers))
    out.append(spot_preemption(shipped, offers))  # fourth: `--graph 4` runs it through the real graph
    # issue 39 item 4: cold loads ~4x the belief's (a cold load of 2,372 s once against a believed 623 s)
    slow_disk = {g: p.with_changes(load_gib_per_s_cold=p.load_gib_per_s_cold / 5, source="truth: slow cold loads")
                 for g, p in shipped.items()}  # fmt: skip
    out.append((se.Scenario("named: slow loads", slow_disk, offers, "cold loads from disk at 1/5 the belief's rate"),
                _goal(150, ["H200", "B200"], spot=True)))  # fmt: skip
    out.append(noisy_near_bound(shipped, offers))
    out.append(dearer_tp(shipped, offers))
    for i in range(count):
        truth = {g: perturbed(p, rng) for g, p in shipped.items()}
        spot = bool(rng.random() > 1 / 3)
        priced = [o.model_copy(update={"usd_per_hour": o.usd_per_hour * float(np.exp(0.25 * rng.standard_normal()))})
                  for o in offers if spot or o.capacity != "spot"]  # fmt: skip
        # the bound around the truth's fastest candidate (unknown to the search): about one goal in six infeasible
        fastest = min(
            c.latency_q_s
            for c in se.truth_candidates(se.Scenario("", truth, priced, ""), _goal(1e9, ["H200", "B200"], True))
        )
        bound = float(np.round(fastest * rng.uniform(0.92, 1.6)))
        out.append((se.Scenario(f"random {i}", truth, priced, f"p95<{bound:g}, spot {'on' if spot else 'off'}"),
                    _goal(bound, ["H200", "B200"], spot=True)))  # fmt: skip
    return out


# ---- the search's cost over its floor -------------------------------------------------------------------------
ORACLE_COLUMNS = ("GPU-h / oracle p50", "GPU-h / oracle p90", "GPU-h / serial oracle p50", "time to answer p50 (h)",
                  "oracle time p50 (h)")  # fmt: skip


def against_oracle(scenario: se.Scenario, goal: Goal, out: Any) -> dict[str, Any]:
    """One run's GPU-hours over issue 39's oracle (one provisioning and load per lane and the claim's run of the
    true best plan, over as many lanes as it needs to answer within the search's aim: the goal's `answer within`,
    else the hour), and over the serial oracle beside it (one lane); its modelled time to the verdict. Infeasible
    truths have no best plan: no ratio."""
    lanes = int(getattr(out, "lanes", 1) or 1)
    requests = search.full_requests(goal)
    aim = goal.answer_within_s if goal.answer_within_s is not None else DEFAULT_ANSWER_S
    floor = se.oracle(scenario, goal, requests, 1, aim_s=aim)  # with the serial oracle's figure beside it
    return {
        "seconds_to_answer": round(out.seconds, 1), "lanes": lanes,
        "oracle_gpu_hours": floor.gpu_hours if floor else None,
        "oracle_lanes": floor.lanes if floor else None,
        "oracle_seconds": round(floor.seconds, 1) if floor else None,
        "over_oracle": out.total_gpu_hours / floor.gpu_hours if floor and floor.gpu_hours > 0 else None,
        "serial_oracle_gpu_hours": floor.serial_gpu_hours if floor else None,
        "over_serial_oracle": out.total_gpu_hours / floor.serial_gpu_hours
        if floor and floor.serial_gpu_hours > 0
        else None,
    }  # fmt: skip


def oracle_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ratios = [r["over_oracle"] for r in rows if r.get("over_oracle") is not None]
    serial = [r["over_serial_oracle"] for r in rows if r.get("over_serial_oracle") is not None]
    times = [r["seconds_to_answer"] for r in rows if r.get("seconds_to_answer") is not None]
    floor_times = [r["oracle_seconds"] for r in rows if r.get("oracle_seconds") is not None]
    return {
        "over_oracle_p50": float(np.median(ratios)) if ratios else None,
        "over_oracle_p90": float(np.quantile(ratios, 0.9)) if ratios else None,
        "over_oracle_runs": len(ratios),
        "over_serial_oracle_p50": float(np.median(serial)) if serial else None,
        "seconds_to_answer_p50": float(np.median(times)) if times else None,
        "seconds_to_answer_p90": float(np.quantile(times, 0.9)) if times else None,
        "oracle_seconds_p50": float(np.median(floor_times)) if floor_times else None,
    }


def oracle_cells(s: dict[str, Any]) -> list[str]:
    def x(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}x"

    def h(v: float | None) -> str:
        return "-" if v is None else f"{v / 3600:.2f}"

    return [x(s["over_oracle_p50"]), x(s["over_oracle_p90"]), x(s.get("over_serial_oracle_p50")),
            h(s["seconds_to_answer_p50"]), h(s["oracle_seconds_p50"])]  # fmt: skip


def run(count: int, seeds: int, strategies: list[str]) -> dict[str, Any]:
    started = time.time()
    rows: list[dict[str, Any]] = []
    partial = RESULTS.with_name("rehearsal.partial.json")  # rows so far, so a long run that is stopped keeps them
    for scenario, goal in truths(count):
        truth = se.truth_table(scenario, goal)
        feasible = any(ok for _, ok in truth.values())
        grid = se.run_grid(scenario, goal, 0)
        sweep = se.run_grid(scenario, goal, 0, keep_nodes=True)  # the same grid keeping each offer's node
        for name in strategies:
            for seed in range(1 if name == "grid" else seeds):
                out = grid if name == "grid" else se.STRATEGIES[name](scenario, goal, seed)
                rows.append({
                    "truth": scenario.name, "note": scenario.note, "strategy": name, "seed": seed,
                    "truly_feasible": feasible, "stop": out.stop, "regret": out.regret,
                    "recommendation": out.recommendation, "gpu_hours": out.total_gpu_hours, "usd": out.total_usd,
                    "grid_gpu_hours": grid.total_gpu_hours, "sweep_gpu_hours": sweep.total_gpu_hours,
                    "extra": out.extra, **against_oracle(scenario, goal, out),
                })  # fmt: skip
        print(f"{scenario.name}: {time.time() - started:.0f} s", file=sys.stderr, flush=True)
        partial.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps({"rows": rows}, default=str))
    return {"rows": rows, "elapsed_s": round(time.time() - started, 1)}


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for name in dict.fromkeys(r["strategy"] for r in rows):
        mine = [r for r in rows if r["strategy"] == name]
        feas = [r for r in mine if r["truly_feasible"]]
        infeas = [r for r in mine if not r["truly_feasible"]]
        regrets = [r["regret"] if r["regret"] is not None else math.inf for r in feas]
        ratio = [r["gpu_hours"] / r["grid_gpu_hours"] for r in mine if r["grid_gpu_hours"] > 0]
        ratio_sweep = [r["gpu_hours"] / r["sweep_gpu_hours"] for r in mine if r.get("sweep_gpu_hours")]
        bad = [r for r in feas if r["stop"] == "converged" and (r["regret"] is None or r["regret"] > 0.05)]
        found = [r for r in infeas if r["stop"] == "infeasible"]
        out.append({
            "strategy": name, "runs": len(mine), "feasible_runs": len(feas),
            "regret_p50": float(np.median(regrets)) if regrets else None,
            "regret_p90": float(np.quantile(regrets, 0.9)) if regrets else None,
            "share_regret_le_5pct": float(np.mean([x <= 0.05 for x in regrets])) if regrets else None,
            "share_converged_regret_gt_5pct": len(bad) / len(mine) if mine else None,
            "infeasible_runs": len(infeas), "infeasible_detected": len(found),
            "infeasible_cost_share_of_grid": float(np.median([r["gpu_hours"] / r["grid_gpu_hours"] for r in found]))
            if found else None,
            "gpu_hours_share_of_grid_p50": float(np.median(ratio)) if ratio else None,
            "gpu_hours_share_of_sweep_p50": float(np.median(ratio_sweep)) if ratio_sweep else None,
            "stops": {s: sum(r["stop"] == s for r in mine) for s in sorted({r["stop"] for r in mine})},
            **oracle_summary(mine),
        })  # fmt: skip
    return out


def _goal_text(goal: Goal) -> str:
    spot = "spot ok" if "spot" in goal.capacities else "no spot"
    return (f"Cosmos3-Super 720p 189 frames, p95 under {goal.latency_bound_s:g} s, cheapest per clip, "
            f"{' or '.join(goal.gpus)}, {spot}, budget ${goal.budget_usd:g}")  # fmt: skip


def _preempted_attempts(db: Path) -> int:
    """Benchmark attempts cut short by a spot preemption in a run's database (their samples kept, marked)."""
    import sqlite3

    if not db.is_file():
        return 0
    with contextlib.closing(sqlite3.connect(db)) as con:
        row = con.execute(
            "SELECT COUNT(DISTINCT benchmark_id || ':' || json_extract(body, '$.attempt')) FROM samples "
            "WHERE json_extract(body, '$.interrupted') = 1"
        ).fetchone()
    return int(row[0] or 0)


def run_graph(sample: int) -> list[dict[str, Any]]:
    """The real graph on the twin (`worldtune tune --twin-profile FOLDER`, one truth profile per GPU type) for the
    two named truths and the first random ones, at the snapshot's prices (the graph reads the real offers)."""
    import subprocess
    import tempfile

    offers = [o for o in all_offers("snapshot") if o.capacity != "serverless"]
    rows = []
    for scenario, goal in truths(max(0, sample - 2))[:sample]:
        scenario = se.Scenario(scenario.name, scenario.truth, offers, scenario.note)
        truth = se.truth_table(scenario, goal)
        best = min((v for v, ok in truth.values() if ok), default=math.inf)
        grid = se.run_grid(scenario, goal, 0)
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "truth"
            folder.mkdir()
            for gpu, profile in scenario.truth.items():
                profile.dump(folder / f"{gpu}.yaml")
            started = time.time()
            out = subprocess.run(
                [str(Path(sys.executable).parent / "worldtune"), "tune", _goal_text(goal), "--yes", "--json",
                 "--db", str(Path(tmp) / "wt.db"), "--twin-profile", str(folder)],
                capture_output=True, text=True, timeout=1800, stdin=subprocess.DEVNULL,
            )  # fmt: skip
            wall = time.time() - started
            cut = _preempted_attempts(Path(tmp) / "wt.db")
        data = json.loads(out.stdout) if out.stdout.strip().startswith("{") else {}
        rec = (data.get("recommendation") or {}).get("key")
        value, ok = truth.get(rec, (math.inf, False)) if rec else (math.inf, False)
        rows.append({
            "truth": scenario.name, "goal": _goal_text(goal), "exit": out.returncode, "stop": data.get("stop_kind"),
            "recommendation": rec, "regret": (value / best - 1) if rec and ok and math.isfinite(best) else None,
            "truly_feasible": math.isfinite(best), "gpu_hours": (data.get("spend") or {}).get("gpu_hours"),
            "grid_gpu_hours": grid.total_gpu_hours, "wall_s": round(wall, 1),
            "stop_reason": data.get("stop_reason"), "preempted_attempts": cut,
        })  # fmt: skip
        print(f"graph {scenario.name}: exit {out.returncode}, {data.get('stop_kind')}, {wall:.0f} s", file=sys.stderr)
    return rows


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--graph":
        rows = run_graph(int(sys.argv[2]) if len(sys.argv) > 2 else 3)
        table = Table(title="Rehearsal through the real graph on the twin (worldtune tune --twin-profile FOLDER)")
        for c in ("truth", "exit", "stop", "regret", "GPU-h", "GPU-h/grid", "preempted", "wall s", "recommendation"):
            table.add_column(c)
        for r in rows:
            regret = "-" if r["regret"] is None else f"{r['regret']:.1%}"
            share = f"{(r['gpu_hours'] or 0) / max(r['grid_gpu_hours'], 1e-9):.1%}"
            table.add_row(r["truth"], str(r["exit"]), str(r["stop"]), regret, f"{r['gpu_hours'] or 0:.1f}", share,
                          str(r["preempted_attempts"]), str(r["wall_s"]), str(r["recommendation"]))  # fmt: skip
        Console(width=220).print(table)
        path = RESULTS.with_name("rehearsal_graph.json")
        path.write_text(json.dumps(stamped({"benchmark": "rehearsal_graph", "date": time.strftime("%Y-%m-%d"),
                                            "rows": rows}), indent=2, default=str))  # fmt: skip
        print(f"saved {path}")
        return
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    seeds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    strategies = sys.argv[3].split(",") if len(sys.argv) > 3 else ["worldtune", "grid", "random", "optuna-tpe"]
    result = run(count, seeds, strategies)
    summary = summarise(result["rows"])
    table = Table(title=f"Rehearsal: {count} random truths + 2 named, {seeds} seed(s) each")
    cols = ["strategy", "runs", "regret p50", "regret p90", "regret<=5%", "converged & regret>5%",
            "infeasible found", "infeasible cost/grid", "GPU-h/grid p50", "GPU-h/sweep p50", *ORACLE_COLUMNS,
            "stops"]  # fmt: skip
    for c in cols:
        table.add_column(c, justify="left" if c in ("strategy", "stops") else "right")
    pct = lambda v: "-" if v is None else ("inf" if not math.isfinite(v) else f"{v:.1%}")  # noqa: E731
    for s in summary:
        table.add_row(
            s["strategy"], str(s["runs"]), pct(s["regret_p50"]), pct(s["regret_p90"]), pct(s["share_regret_le_5pct"]),
            pct(s["share_converged_regret_gt_5pct"]), f"{s['infeasible_detected']}/{s['infeasible_runs']}",
            pct(s["infeasible_cost_share_of_grid"]), pct(s["gpu_hours_share_of_grid_p50"]),
            pct(s["gpu_hours_share_of_sweep_p50"]), *oracle_cells(s), str(s["stops"]),
        )  # fmt: skip
    Console(width=220).print(table)
    named = [r for r in result["rows"] if r["truth"].startswith("named") and r["strategy"] == "worldtune"]
    for r in named:
        print(f"{r['truth']} seed {r['seed']}: stop {r['stop']}, regret {pct(r['regret'])}, "
              f"{r['gpu_hours']:.1f} GPU-h ({r['gpu_hours'] / max(r['grid_gpu_hours'], 1e-9):.1%} of grid), "
              f"rec {r['recommendation']}")  # fmt: skip
    record = {"benchmark": "rehearsal", "date": time.strftime("%Y-%m-%d"), "truths": count + 2, "seeds": seeds,
              "measurement": "simulated from perf_model.predict on the truth profile with seeded noise (the twin's "
              "own timing model); the real graph on the twin is not part of this run",
              "summary": summary, **result}  # fmt: skip
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(stamped(record), indent=2, default=str))
    print(f"saved {RESULTS}")


if __name__ == "__main__":
    main()
