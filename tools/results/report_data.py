"""What a tuning run's report shows, gathered in one capability: the completed run's record from the results
database, the Pareto frontiers of its plots (policies/pareto.py) and the recommended deployment's SkyPilot
service/task YAML and serve commands (sky/render.py, with the model's numbers from tools/deployments/preview.py),
so the report (agent/report.py) only draws and writes, and opens no database.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from worldtune.policies.pareto import Direction, pareto_frontier
from worldtune.tools.store.database import Store
from worldtune.tools.words.deployment import Deployment
from worldtune.tools.words.errors import InvalidInput
from worldtune.tools.words.run_summary import CandidateRow, RunSummary

DIRECTIONS: dict[str, Direction] = {"latency_s": "min", "usd_per_clip": "min", "clips_per_hour_per_node": "max"}
# The report's plots: (x, y) of every candidate; each has its frontier.
PLOTS: tuple[tuple[str, str], ...] = (("latency_s", "clips_per_hour_per_node"), ("latency_s", "usd_per_clip"))


class ReportData(BaseModel):
    """A completed run's record with what the report draws and renders from it."""

    run_id: str
    summary: RunSummary = Field(description="the run's summary as recorded when it completed")
    frontiers: dict[str, list[int]] = Field(
        description="'x:y' -> indices into the summary's candidates on the Pareto frontier of the candidates, in "
        "order of x"
    )
    artifacts: dict[str, str] = Field(
        description="the recommended deployment's skypilot_service_yaml, skypilot_task_yaml and serve_commands"
    )
    folder: str = Field(description="where the report is written unless told otherwise: reports/RUN_ID by the database")

    def frontier(self, x_key: str, y_key: str) -> list[CandidateRow]:
        """The candidates on the frontier of the (x_key, y_key) plot, in order of x."""
        return [self.summary.candidates[i] for i in self.frontiers[f"{x_key}:{y_key}"]]


def frontier(candidates: Sequence[CandidateRow], x_key: str, y_key: str) -> list[int]:
    """Indices of the candidates no other dominates on (x_key, y_key), among those with both figures above zero,
    in order of x."""
    shown = [(i, c) for i, c in enumerate(candidates) if getattr(c, x_key) > 0 and getattr(c, y_key) > 0]
    front = pareto_frontier([c for _, c in shown], {x_key: DIRECTIONS[x_key], y_key: DIRECTIONS[y_key]})
    on = {id(c) for c in front}
    return sorted((i for i, c in shown if id(c) in on), key=lambda i: float(getattr(candidates[i], x_key)))


def load_summary(store: Store, run_id: str) -> RunSummary:
    """The finished run's record from the results database, read as words; a clear error for unknown or unfinished
    runs and for a record worldtune cannot read (written by a different version, or edited)."""
    row = store.get_run(run_id)
    if row is None:
        known = [r["id"] for r in store.list_runs(20) if r["kind"] == "tune"][:5]
        raise InvalidInput("run_id", run_id, f"a tuning run in {store.path}", f"recent: {', '.join(known) or 'none'}")
    if row["status"] != "completed" or not isinstance(row.get("summary"), dict):
        raise InvalidInput("run_id", run_id, "a completed run", f"it is {row['status']}: worldtune resume {run_id}")
    try:
        return RunSummary.model_validate(row["summary"])
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidInput(
            "run_id", run_id, "a run record this version of worldtune reads", f"its {where}: {first['msg']}"
        ) from None


def deployment_artifacts(summary: RunSummary) -> dict[str, str]:
    """SkyPilot service and task YAML and the serve commands of the recommended deployment."""
    from worldtune.sky import render
    from worldtune.tools.deployments.preview import render_options

    rec = summary.recommendation
    if rec is None:
        return {}
    offer = rec.offer_detail
    deployment = Deployment(
        id=f"wt-{summary.run_id[-6:]}",
        run_id=summary.run_id,
        model=summary.goal.workload.model,
        gpu=rec.gpu,
        plan=rec.plan,
        infra=offer.infra,
        engine="vllm-omni",
        capacity=rec.capacity,
        offer=offer,
        usd_per_hour=offer.usd_per_hour,
    )
    options = render_options(deployment, as_service=True)  # the model's numbers: start-up allowance, SkyServe target
    return {
        "skypilot_service_yaml": render.to_yaml(render.render_service(deployment, options)),
        "skypilot_task_yaml": render.to_yaml(render.render_task(deployment, options)),
        "serve_commands": "\n".join(render.serve_commands(deployment)),
    }


def report_data(run_id: str, db_path: str | Path | None = None) -> ReportData:
    """Everything `worldtune report RUN_ID` shows of a completed run in the database at `db_path`."""
    store = Store(db_path)
    summary = load_summary(store, run_id)
    return ReportData(
        run_id=run_id,
        summary=summary,
        frontiers={f"{x}:{y}": frontier(summary.candidates, x, y) for x, y in PLOTS},
        artifacts=deployment_artifacts(summary),
        folder=str(store.path.parent / "reports" / run_id),
    )
