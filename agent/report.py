"""The report of a tuning run: an HTML page, PNG plots, the JSON record and the recommended deployment's YAML.

Plots (matplotlib, Agg): latency vs clips/hour per node and cost per clip vs latency for every
candidate, as first predicted, as finally believed, and as measured; the Pareto frontier of what was
measured or believed; the chosen point. The SkyPilot service/task YAML and the serve commands come
from sky/render.py, so they are exactly what `worldtune deploy` would launch.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from worldtune.policies.pareto import Direction, pareto_frontier
from worldtune.tools.deployment import Deployment
from worldtune.tools.errors import InvalidInput
from worldtune.tools.offer import Offer
from worldtune.tools.store import Store


def load_record(run_id: str, db_path: str | None = None) -> dict[str, Any]:
    """The finished run's record from the results database; a clear error for unknown or unfinished runs."""
    store = Store(db_path)
    row = store.get_run(run_id)
    if row is None:
        known = [r["id"] for r in store.list_runs(20) if r["kind"] == "tune"][:5]
        raise InvalidInput("run_id", run_id, f"a tuning run in {store.path}", f"recent: {', '.join(known) or 'none'}")
    if row["status"] != "completed" or not isinstance(row.get("summary"), dict):
        raise InvalidInput("run_id", run_id, "a completed run", f"it is {row['status']}: worldtune resume {run_id}")
    summary: dict[str, Any] = row["summary"]
    return summary


def deployment_artifacts(record: dict[str, Any]) -> dict[str, str]:
    """SkyPilot service and task YAML and the serve commands of the recommended deployment."""
    from worldtune.sky import render

    rec = record.get("recommendation")
    if not rec:
        return {}
    offer = Offer.model_validate(rec["offer_detail"])
    deployment = Deployment(
        id=f"wt-{record['run_id'][-6:]}",
        run_id=record["run_id"],
        model=record["goal"]["workload"]["model"],
        gpu=rec["gpu"],
        plan=rec["plan"],
        infra=offer.infra,
        engine="vllm-omni",
        capacity=rec["capacity"],
        offer=offer,
        usd_per_hour=offer.usd_per_hour,
    )
    return {
        "skypilot_service_yaml": render.to_yaml(render.render_service(deployment)),
        "skypilot_task_yaml": render.to_yaml(render.render_task(deployment)),
        "serve_commands": "\n".join(render.serve_commands(deployment)),
    }


def _plot(record: dict[str, Any], x_key: str, y_key: str, x_label: str, y_label: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cands = record["candidates"]
    chosen = (record.get("recommendation") or {}).get("key")
    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=110)
    first = [(c[f"predicted_{x_key}"], c[f"predicted_{y_key}"]) for c in cands if c.get(f"predicted_{x_key}")]
    if first:
        ax.scatter([x for x, _ in first], [y for _, y in first], s=8, c="#cccccc", label="predicted before measuring")
    believed = [c for c in cands if c["stage"] == "predicted"]
    ax.scatter(
        [c[x_key] for c in believed],
        [c[y_key] for c in believed],
        s=10,
        c="#7fa7d9",
        label="predicted after recalibration",
    )
    probed = [c for c in cands if c["stage"] == "probed"]
    if probed:
        ax.scatter([c[x_key] for c in probed], [c[y_key] for c in probed], s=30, c="#f0a030", label="probed")
    measured = [c for c in cands if c["stage"] == "measured"]
    if measured:
        ax.scatter([c[x_key] for c in measured], [c[y_key] for c in measured], s=45, c="#2a9d4a", label="measured")
    directions: dict[str, Direction] = {"latency_s": "min", "usd_per_clip": "min", "clips_per_hour_per_node": "max"}
    front = sorted(pareto_frontier(cands, {x_key: directions[x_key], y_key: directions[y_key]}), key=lambda c: c[x_key])
    if front:
        ax.plot([c[x_key] for c in front], [c[y_key] for c in front], "-", c="#444444", lw=1, label="Pareto frontier")
    for c in cands:
        if c["key"] == chosen:
            ax.scatter([c[x_key]], [c[y_key]], s=220, marker="*", c="#d62828", zorder=5, label="chosen")
    bound = record["goal"].get("latency_bound_s")
    if bound and "latency" in x_key:
        ax.axvline(bound, ls="--", c="#d62828", lw=0.8, label=f"p{record['goal']['latency_percentile']} bound")
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    if y_key == "usd_per_clip":
        ax.set_yscale("log")
    ax.set_xscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"{record['goal']['describe']}", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


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


def _html(record: dict[str, Any], images: dict[str, str], artifacts: dict[str, str]) -> str:
    rec = record.get("recommendation") or {}
    m, p, spend = record["measured"], record["predicted"], record["spend"]
    figures = [{"figure": k, "measured": m.get(k), "predicted before measuring": p.get(k)} for k in m]
    measured_rows = [
        {k: r.get(k) for k in ("kind", "key", "per_step_s", "fixed_s", "latencies_s", "usd", "benchmark_id")}
        for r in record["measurements"]
    ]
    shown = [c for c in record["candidates"] if c["stage"] != "predicted"] + [
        c for c in record["candidates"] if c["stage"] == "predicted"
    ][:30]
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>worldtune run "
        f"{html.escape(record['run_id'])}</title><style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}}"
        "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px}"
        "pre{background:#f4f4f4;padding:8px;overflow:auto;font-size:12px}</style></head><body>",
        f"<h1>worldtune run {html.escape(record['run_id'])}</h1>",
        f"<p><b>Goal</b>: {html.escape(record['goal']['describe'])}<br>"
        f"<i>{html.escape(record['goal'].get('text', ''))}</i></p>",
        "<h2>Recommendation</h2>",
        (
            f"<p><b>{html.escape(str(rec.get('gpu')))}</b> plan <b>{html.escape(str(rec.get('plan')))}</b> x "
            f"{rec.get('nodes')} node(s) ({rec.get('replicas')} replicas), {html.escape(str(rec.get('capacity')))} on "
            f"{html.escape(str(rec.get('offer')))} at ${rec.get('usd_per_hour', 0):.2f}/h</p>"
            if rec
            else "<p>No verified recommendation.</p>"
        ),
        f"<p><b>Why it stopped</b>: {html.escape(record['stop_reason'])}</p>",
        _table(figures, ["figure", "measured", "predicted before measuring"]),
        "<h2>What the search cost</h2>",
        _table([spend], list(spend)),
        "<h2>Plots</h2>",
        *[f"<p><img src='{html.escape(Path(v).name)}' alt='{html.escape(k)}'></p>" for k, v in images.items()],
        "<p>Grey: predicted before measuring; blue: predicted after recalibration; orange: probed; green: measured; "
        "line: Pareto frontier; red star: chosen.</p>",
        "<h2>Every measurement</h2>",
        _table(measured_rows, list(measured_rows[0]) if measured_rows else ["kind"]),
        "<h2>Candidates (measured first, then the best predicted)</h2>",
        _table(
            shown,
            [
                "key",
                "stage",
                "feasible",
                "latency_s",
                "clips_per_hour_per_node",
                "usd_per_clip",
                "predicted_latency_s",
                "predicted_usd_per_clip",
            ],
        ),
        "<h2>Ready to apply</h2>",
        *[f"<h3>{html.escape(k)}</h3><pre>{html.escape(v)}</pre>" for k, v in artifacts.items()],
        "<h2>What the agent did</h2><ol>",
        *[f"<li>{html.escape(e)}</li>" for e in record.get("events", [])],
        "</ol></body></html>",
    ]
    return "\n".join(parts)


def write_report(run_id: str, out_dir: str | Path | None = None, db_path: str | None = None) -> dict[str, str]:
    """Write report.html, two PNG plots, record.json and the deployment's YAML; returns name -> path."""
    record = load_record(run_id, db_path)
    folder = Path(out_dir) if out_dir else Store(db_path).path.parent / "reports" / run_id
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
    )
    _plot(record, "latency_s", "usd_per_clip", "latency per clip (s)", "USD per clip", images["cost_per_clip_png"])
    artifacts = deployment_artifacts(record)
    for name, text in artifacts.items():
        suffix = "sh" if name == "serve_commands" else "yaml"
        path = folder / f"{name.removesuffix('_yaml')}.{suffix}"
        path.write_text(text + "\n")
        written["skypilot_yaml" if name == "skypilot_service_yaml" else name] = str(path)
    (folder / "record.json").write_text(json.dumps(record, indent=2, default=str))
    (folder / "report.html").write_text(_html(record, {k: str(v) for k, v in images.items()}, artifacts))
    written |= {k: str(v) for k, v in images.items()}
    written["json"] = str(folder / "record.json")
    written["html"] = str(folder / "report.html")
    return dict(sorted(written.items()))
