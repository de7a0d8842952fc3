"""The report's interactive page: every candidate of a run in one plotly scatter, hovering shows what it is.

Latency per clip against cost per clip (log axes), colour by GPU type, marker by capacity, size by how it
is known (predicted, probed, full runs), the Pareto frontier and the chosen point; the hover names the plan,
offer, stage and figures, as simulated (twin) or measured. The page carries plotly.js itself, so it opens
offline. Written only when plotly (the 'agent' extra) is installed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from worldtune.agent.provenance import of_record
from worldtune.tools.words.run_summary import CandidateRow, RunSummary

SYMBOLS = {"on-demand": "circle", "spot": "triangle-up", "serverless": "square"}
COLOURS = {"H200": "#1f77b4", "B200": "#d62728", "H100": "#2ca02c", "B300": "#9467bd"}
SIZES = {"predicted": 6, "probed": 11, "measured": 15}


def _hover(c: CandidateRow, word: str) -> str:
    seen = word if c.stage != "predicted" else "predicted (not run)"
    return (
        f"<b>{c.plan}</b> on {c.offer}<br>{c.gpu} x {c.nodes} node(s), {c.capacity}, "
        f"${c.usd_per_hour:.2f}/h<br>{seen}: latency {c.latency_s:.1f} s, "
        f"{c.clips_per_hour_per_node:.1f} clips/h/node, ${c.usd_per_clip:.3f}/clip<br>"
        f"predicted before measuring: {_num(c.predicted_latency_s, 1)} s, "
        f"${_num(c.predicted_usd_per_clip, 3)}/clip<br>meets the goal (belief): {c.feasible}"
    )


def _ticks(values: list[float]) -> dict[str, Any]:
    """Log-axis ticks at 1, 2, 5 x 10^k written as plain numbers (plotly's default labels read as '5 6 7 8 9 100 2')."""
    import math

    if not values:
        return {}
    lo, hi = min(values) / 1.3, max(values) * 1.3
    ticks = [m * 10.0**k for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1) for m in (1, 2, 5)]
    shown = [t for t in ticks if lo <= t <= hi]
    return {"tickvals": shown, "ticktext": [f"{t:g}" for t in shown], "minor": {"showgrid": False}}


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def write_interactive(record: RunSummary, path: Path, front: list[CandidateRow]) -> bool:
    """Write the page; False (and nothing written) when plotly is not installed. `front`: the candidates on the
    latency / cost-per-clip Pareto frontier, in order of latency (tools/results/report_data.py)."""
    try:
        import plotly.graph_objects as go
    except ImportError:
        return False
    simulated = of_record(record).simulated
    word = "simulated on the twin" if simulated else "measured"
    cands = [c for c in record.candidates if c.latency_s > 0 and c.usd_per_clip > 0]
    fig = go.Figure()
    for stage in ("predicted", "probed", "measured"):  # later stages drawn last, so they stay on top
        for gpu in sorted({c.gpu for c in cands}):
            for capacity in sorted({c.capacity for c in cands}):
                group = [c for c in cands if (c.stage, c.gpu, c.capacity) == (stage, gpu, capacity)]
                if not group:
                    continue
                fig.add_trace(
                    go.Scatter(
                        x=[c.latency_s for c in group],
                        y=[c.usd_per_clip for c in group],
                        mode="markers",
                        name=f"{gpu} {capacity} ({stage if stage == 'predicted' else word + ', ' + stage})",
                        marker={
                            "color": COLOURS.get(gpu, "#7f7f7f"),
                            "symbol": SYMBOLS.get(capacity, "diamond"),
                            "size": SIZES[stage],
                            "opacity": 0.4 if stage == "predicted" else 1.0,
                            "line": {"width": 0 if stage == "predicted" else 1.5, "color": "black"},
                        },
                        text=[_hover(c, word) for c in group],
                        hoverinfo="text",
                    )
                )
    fig.add_trace(
        go.Scatter(
            x=[c.latency_s for c in front],
            y=[c.usd_per_clip for c in front],
            mode="lines+text",
            text=[str(c.plan) for c in front],
            textposition="top right",
            name="Pareto frontier",
            line={"color": "#444444"},
            hoverinfo="skip",
        )
    )
    chosen = [c for c in cands if record.recommendation and c.key == record.recommendation.key]
    if chosen:
        fig.add_trace(
            go.Scatter(
                x=[chosen[0].latency_s],
                y=[chosen[0].usd_per_clip],
                mode="markers",
                name="chosen",
                hoverinfo="skip",
                marker={"symbol": "star-open", "size": 26, "color": "#d62828"},
            )
        )
    title = record.goal.description + (" | SIMULATED: twin engine, no GPU ran" if simulated else "")
    x_ticks, y_ticks = _ticks([c.latency_s for c in cands]), _ticks([c.usd_per_clip for c in cands])
    fig.update_layout(
        title={"text": title, "font": {"size": 12}},
        template="plotly_white",
        height=650,
        xaxis={"title": "latency per clip (s)", "type": "log", **x_ticks},
        yaxis={"title": "USD per clip", "type": "log", **y_ticks},
    )
    fig.write_html(path, include_plotlyjs=True, full_html=True)
    return True
