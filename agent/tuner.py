"""The agent as the MCP server's Tuner (tools/words/tuning.py): cheap to import, the graph loads on first use.

tools/runs/tuning_jobs.py records each run (before it starts, and its failure) and asks this Tuner to read the goal,
run the graph and say what the run's checkpoint holds; the agent opens no database of its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from worldtune.tools.words.errors import require_extra
from worldtune.tools.words.tuning import Failed, TuningJob, TuningRequest

if TYPE_CHECKING:
    from worldtune.agent.configuration import TuneOptions
    from worldtune.agent.goal_reader import ParsedGoal

# The agent's own imports (LangGraph, its SQLite checkpointer) come with the 'agent' extra. Checked before a run
# is recorded or a thread started, so a bare install answers with what to install instead of a run that dies.
AGENT_MODULES = ("langgraph", "langgraph.checkpoint.sqlite")


class AgentTuner:
    """Runs tuning jobs in this process with agent.runner (one background thread per run), or detached."""

    def __init__(self) -> None:
        self._prepared: dict[str, tuple[str, ParsedGoal]] = {}  # run id -> (goal text, goal read), until launched

    def prepare(self, goal: str, request: TuningRequest) -> TuningJob:
        for module in AGENT_MODULES:
            require_extra("start_tuning (the tuning agent)", module, "agent")
        from worldtune.agent import runner

        run_id, parsed = runner.prepare(goal, _options(request))
        self._prepared[run_id] = (goal, parsed)
        return TuningJob(run_id=run_id, goal=parsed.goal.model_dump(mode="json"))

    def launch(self, job: TuningJob, request: TuningRequest, failed: Failed) -> None:
        from worldtune.agent import runner

        text, parsed = self._prepared.pop(job.run_id)
        if request.detach:
            runner.spawn_detached(job.run_id, text, _options(request))
        else:
            runner.run_in_thread(job.run_id, parsed, _options(request), failed)

    def progress(self, run_id: str, db_path: str) -> dict[str, Any]:
        from worldtune.agent import runner

        return runner.progress_of(run_id, db_path)

    def resume(self, run_id: str, approve: bool, db_path: str | None, failed: Failed) -> None:
        from worldtune.agent import runner

        runner.resume_tuning(run_id, approve, db_path, failed)

    def stop_run(self, run_id: str, reason: str) -> bool:
        from worldtune.agent import runner

        return runner.stop_run(run_id, reason)

    def write_report(self, run_id: str, db_path: str) -> dict[str, str]:
        from worldtune.agent.report import write_report
        from worldtune.tools.results.report_data import report_data

        return write_report(report_data(run_id, db_path))

    def session_ended(self) -> list[str]:
        from worldtune.agent import runner

        return runner.stop_session_runs()


def _options(request: TuningRequest) -> TuneOptions:
    from worldtune.agent.configuration import TuneOptions

    return TuneOptions(**request.model_dump(exclude={"detach"}))
