"""The report of a tuning run: an HTML page, PNG plots, the JSON record and the recommended deployment's YAML.

The page opens with what is simulated (a twin run), measured (real engines) and assumed (model terms),
how far the latency claim goes with the samples taken, and the prices' snapshot date (agent/provenance.py).
Plots (matplotlib, Agg): latency vs clips/hour per node and cost per clip vs latency for every candidate;
colour is the GPU type, marker the capacity, size and edge how it is known (predicted, probed, full runs,
drawn in that order so runs stay on top); the Pareto frontier labelled by plan; the chosen point. The record,
the frontiers and the SkyPilot service/task YAML and serve commands (sky/render.py, exactly what `worldtune deploy`
would launch) come from the report-data capability (tools/results/report_data.py): this module draws and writes.
"""

from __future__ import annotations

import ast
import html
import json
import re
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

from worldtune.agent.provenance import labels, of_record
from worldtune.agent.report_fleet import fleet_html, fleet_of, write_fleet_day
from worldtune.agent.report_interactive import write_interactive
from worldtune.tools.words.run_summary import CandidateRow, RunSummary

if TYPE_CHECKING:
    from worldtune.tools.deployments.fleet_rehearsal import FleetOutcome
    from worldtune.tools.results.report_data import ReportData


GPU_COLOURS = {"H200": "#1f77b4", "B200": "#d62728", "H100": "#2ca02c", "B300": "#9467bd"}
CAPACITY_MARKERS = {"on-demand": "o", "spot": "^", "serverless": "s"}
STAGE_STYLE: dict[str, dict[str, Any]] = {  # later stages drawn bigger and on top: what was measured stays visible
    "predicted": {"s": 14, "alpha": 0.35, "linewidths": 0.0, "zorder": 2},
    "probed": {"s": 46, "alpha": 0.9, "linewidths": 0.8, "zorder": 5},
    "measured": {"s": 80, "alpha": 1.0, "linewidths": 1.4, "zorder": 6},
}


def _readable_log_axis(axis: Any) -> None:
    """Log scale with ticks at 1, 2, 5 x 10^k written as plain numbers (0.2, 50, 100), never 6x10^1."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def _plot(
    record: RunSummary, x_key: str, y_key: str, x_label: str, y_label: str, path: Path, front: list[CandidateRow]
) -> None:
    """One scatter of every candidate: colour = GPU type, marker = capacity, size/edge = how it is known; `front`:
    the candidates on its Pareto frontier, in order of x (tools/results/report_data.py)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    cands = [c for c in record.candidates if getattr(c, x_key) > 0 and getattr(c, y_key) > 0]
    chosen = record.recommendation.key if record.recommendation else None
    simulated = of_record(record).simulated
    fig, ax = plt.subplots(figsize=(9, 6), dpi=110)
    for stage, style in STAGE_STYLE.items():
        for (gpu, capacity), group in _groups([c for c in cands if c.stage == stage]).items():
            ax.scatter(
                [getattr(c, x_key) for c in group],
                [getattr(c, y_key) for c in group],
                c=GPU_COLOURS.get(gpu, "#7f7f7f"),
                marker=CAPACITY_MARKERS.get(capacity, "D"),
                edgecolors="black",
                **style,
            )
    if front:
        ax.plot(
            [getattr(c, x_key) for c in front], [getattr(c, y_key) for c in front], "-", c="#444444", lw=1, zorder=3
        )
        for c in front[:10]:  # the frontier's plans by name: the choices a person weighs
            ax.annotate(
                f"{c.plan} ({c.gpu})",
                (getattr(c, x_key), getattr(c, y_key)),
                textcoords="offset points",
                xytext=(6, 4),
                fontsize=7,
                color="#333333",
                zorder=7,
            )
    for c in cands:
        if c.key == chosen:  # hollow, under the measured point: the point itself stays visible
            ax.scatter(
                [getattr(c, x_key)],
                [getattr(c, y_key)],
                s=420,
                marker="*",
                facecolors="none",
                edgecolors="#d62828",
                linewidths=1.6,
                zorder=4,
            )
    bound = record.goal.latency_bound_s
    if bound and "latency" in x_key:
        ax.axvline(bound, ls="--", c="#d62828", lw=0.8, zorder=1)
    ax.set_xscale("log")
    _readable_log_axis(ax.xaxis)
    if y_key == "usd_per_clip":
        ax.set_yscale("log")
        _readable_log_axis(ax.yaxis)
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    ax.grid(alpha=0.3, which="major")
    measured_word = "simulated on the twin" if simulated else "measured"
    handles = [
        Line2D([], [], ls="", marker="o", color=col, label=gpu)
        for gpu, col in GPU_COLOURS.items()
        if any(c.gpu == gpu for c in cands)
    ]
    handles += [
        Line2D([], [], ls="", marker=m, color="#555555", label=cap)
        for cap, m in CAPACITY_MARKERS.items()
        if any(c.capacity == cap for c in cands)
    ]
    handles += [
        Line2D([], [], ls="", marker="o", color="#999999", alpha=0.4, markersize=4, label="predicted (not run)"),
        Line2D(
            [],
            [],
            ls="",
            marker="o",
            color="#999999",
            markeredgecolor="black",
            markersize=6,
            label=f"probed ({measured_word})",
        ),
        Line2D(
            [],
            [],
            ls="",
            marker="o",
            color="#999999",
            markeredgecolor="black",
            markeredgewidth=1.4,
            markersize=8,
            label=f"full runs ({measured_word})",
        ),
        Line2D([], [], ls="-", color="#444444", label="Pareto frontier"),
        Line2D(
            [], [], ls="", marker="*", markerfacecolor="none", markeredgecolor="#d62828", markersize=14, label="chosen"
        ),
    ]
    if bound and "latency" in x_key:
        handles.append(Line2D([], [], ls="--", color="#d62828", label=f"p{record.goal.latency_percentile} bound"))
    ax.legend(handles=handles, fontsize=8, loc="best", framealpha=0.9)
    title = record.goal.description + (" | SIMULATED (twin engine, no GPU ran)" if simulated else "")
    ax.set_title("\n".join(textwrap.wrap(title, 120)), fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _groups(cands: list[CandidateRow]) -> dict[tuple[str, str], list[CandidateRow]]:
    grouped: dict[tuple[str, str], list[CandidateRow]] = {}
    for c in cands:
        grouped.setdefault((c.gpu, c.capacity), []).append(c)
    return grouped


def _table(rows: list[dict[str, Any]], keys: list[str]) -> str:
    head = "".join(f"<th>{html.escape(k)}</th>" for k in keys)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(r.get(k)))}</td>" for k in keys) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.4g}"
    if isinstance(value, list):
        return ", ".join(f"{v:.1f}" if isinstance(v, float) else str(v) for v in value)
    return "-" if value is None else str(value)


_DICT_IN_EVENT = re.compile(r"\{[^{}]*\}")


def readable_event(event: str) -> str:
    """An event line with any Python dict in it written as `key value, ...` (the log is for people)."""

    def plain(match: re.Match[str]) -> str:
        try:
            found = ast.literal_eval(match.group(0))
        except (ValueError, SyntaxError):
            return match.group(0)
        if not isinstance(found, dict):
            return match.group(0)
        return ", ".join(f"{k} {_cell(v)}" for k, v in found.items())

    return _DICT_IN_EVENT.sub(plain, event)


STYLE = (
    "body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
    "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px}"
    # serve lines and YAML wrap instead of hiding behind a horizontal scroll
    "pre{background:#f4f4f4;padding:8px;font-size:12px;white-space:pre-wrap;overflow-wrap:anywhere}"
    ".provenance{border:2px solid #b8860b;background:#fff8e1;padding:8px 14px;margin:1em 0}"
    ".provenance.simulated h2{color:#8a5a00}.provenance li{margin:3px 0}"
    "img{max-width:100%}"
)


def _provenance_html(record: RunSummary) -> str:
    """The box at the top: simulated or measured, what is assumed, how far the latency claim goes, price date."""
    prov = of_record(record)
    title = (
        "Simulated rehearsal: the twin engine stood in for vLLM-Omni; no GPU ran"
        if prov.simulated
        else "Measured on real GPUs with vLLM-Omni"
    )
    items = "".join(f"<li>{html.escape(line)}</li>" for line in labels(prov))
    kind = "provenance simulated" if prov.simulated else "provenance"
    return f"<div class='{kind}' id='provenance'><h2>{html.escape(title)}</h2><ul>{items}</ul></div>"


def _recommendation_html(record: RunSummary) -> list[str]:
    rec = record.recommendation
    prov = of_record(record)
    m, p = record.measured.model_dump(), record.predicted
    column = "simulated on the twin" if prov.simulated else "measured"
    figures = [{"figure": k, column: v, "predicted before measuring": p.figure(k)} for k, v in m.items()]
    head = (
        f"<p><b>{html.escape(rec.gpu)}</b> plan <b>{html.escape(str(rec.plan))}</b> x "
        f"{rec.nodes} node(s) ({rec.replicas} replicas), {html.escape(rec.capacity)} on "
        f"{html.escape(rec.offer)} at ${rec.usd_per_hour:.2f}/h "
        f"<small>({html.escape(prov.prices)})</small></p>"
        if rec
        else "<p>No verified recommendation.</p>"
    )
    claim = prov.latency
    return [
        "<h2>Recommendation</h2>",
        head,
        f"<p><b>Why it stopped</b>: {html.escape(record.stop_reason)}</p>",
        _table(figures, ["figure", column, "predicted before measuring"]),
        f"<p><b>Latency claim</b>: {html.escape(claim.claim or 'none')}. {html.escape(claim.empirical)}.</p>",
    ]


def _html(record: RunSummary, fleet: FleetOutcome | None, images: dict[str, str], artifacts: dict[str, str]) -> str:
    prov = of_record(record)
    spend = record.spend.model_dump(mode="json")
    measured_rows = [
        {k: r.get(k) for k in ("kind", "key", "per_step_s", "fixed_s", "latencies_s", "usd", "benchmark_id")}
        for r in record.measurements
    ]
    candidates = [c.model_dump(mode="json") for c in record.candidates]
    shown = [c for c in candidates if c["stage"] != "predicted"] + [c for c in candidates if c["stage"] == "predicted"][
        :30
    ]
    keys = [
        "key",
        "gpu",
        "capacity",
        "stage",
        "feasible",
        "latency_s",
        "clips_per_hour_per_node",
        "usd_per_clip",
        "predicted_latency_s",
        "predicted_usd_per_clip",
    ]
    artifacts_title = (
        "Deployment artifacts (rendered for vLLM-Omni from a simulated choice: not launched, verify on GPUs first)"
        if prov.simulated
        else "Deployment artifacts (rendered, not launched)"
    )
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>worldtune run {html.escape(record.run_id)}"
        f"</title><style>{STYLE}</style></head><body>",
        f"<h1>worldtune run {html.escape(record.run_id)}</h1>",
        f"<p><b>Goal</b>: {html.escape(record.goal.description)}<br><i>{html.escape(record.goal.text)}</i></p>",
        _provenance_html(record),
        *_recommendation_html(record),
        "<h2>What the search cost</h2>",
        f"<p>{html.escape(prov.spend)}</p>",
        _table([spend], list(spend)),
        "<h2>Plots</h2>",
        "<p><a href='candidates.html'>Interactive: every candidate, hover for plan, offer and figures</a></p>"
        if (Path(images.get("cost_per_clip_png", "")).parent / "candidates.html").is_file()
        else "",
        *[f"<p><img src='{html.escape(Path(v).name)}' alt='{html.escape(k)}'></p>" for k, v in images.items()],
        "<p>Colour: GPU type; marker: capacity (circle on-demand, triangle spot, square serverless); faint: "
        "predicted and never run; black edge: probed; thick edge: full runs; line: Pareto frontier, labelled by "
        "plan; hollow red star: chosen.</p>",
        fleet_html(fleet),
        "<h2>Every measurement" + (" (simulated on the twin)" if prov.simulated else "") + "</h2>",
        _table(measured_rows, list(measured_rows[0]) if measured_rows else ["kind"]),
        "<h2>Candidates (run first, then the best predicted)</h2>",
        _table(shown, keys),
        f"<h2>{html.escape(artifacts_title)}</h2>",
        *[f"<h3>{html.escape(k)}</h3><pre>{html.escape(v)}</pre>" for k, v in artifacts.items()],
        "<h2>What the agent did</h2><ol>",
        *[f"<li>{html.escape(readable_event(e))}</li>" for e in record.events],
        "</ol></body></html>",
    ]
    return "\n".join(parts)


def write_report(data: ReportData, out_dir: str | Path | None = None) -> dict[str, str]:
    """Write report.html, two PNG plots, record.json and the deployment's YAML of the run `data` holds
    (tools/report_data.report_data reads it from the results database); returns name -> path."""
    record = data.summary
    folder = Path(out_dir) if out_dir else Path(data.folder)
    folder.mkdir(parents=True, exist_ok=True)
    written: dict[str, str] = {}
    images = {
        "latency_vs_throughput_png": folder / "latency_vs_throughput.png",
        "cost_per_clip_png": folder / "cost_per_clip.png",
    }
    _plot(
        record,
        "latency_s",
        "clips_per_hour_per_node",
        "latency per clip (s)",
        "clips per hour per node",
        images["latency_vs_throughput_png"],
        data.frontier("latency_s", "clips_per_hour_per_node"),
    )
    cost_front = data.frontier("latency_s", "usd_per_clip")
    _plot(
        record,
        "latency_s",
        "usd_per_clip",
        "latency per clip (s)",
        "USD per clip",
        images["cost_per_clip_png"],
        cost_front,
    )
    fleet = fleet_of(record)  # read once: the day's plot, the section and the service's YAML
    if write_fleet_day(fleet, folder / "fleet_day.png"):  # a goal with traffic: its fleet's simulated day
        images["fleet_day_png"] = folder / "fleet_day.png"
    interactive = folder / "candidates.html"
    # plotly: hover shows each candidate (the 'agent' extra has it)
    if write_interactive(record, interactive, cost_front):
        written["interactive_html"] = str(interactive)
    artifacts = dict(data.artifacts)
    if fleet and fleet.skyserve_service_yaml:  # the fleet's SkyServe service, autoscaling filled
        artifacts["fleet_service_yaml"] = fleet.skyserve_service_yaml.rstrip()
    for name, text in artifacts.items():
        suffix = "sh" if name == "serve_commands" else "yaml"
        path = folder / f"{name.removesuffix('_yaml')}.{suffix}"
        path.write_text(text + "\n")
        written["skypilot_yaml" if name == "skypilot_service_yaml" else name] = str(path)
    (folder / "record.json").write_text(json.dumps(record.record(), indent=2, default=str))
    (folder / "report.html").write_text(_html(record, fleet, {k: str(v) for k, v in images.items()}, artifacts))
    written |= {k: str(v) for k, v in images.items()}
    written["json"] = str(folder / "record.json")
    written["html"] = str(folder / "report.html")
    return dict(sorted(written.items()))
