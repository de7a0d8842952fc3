"""The agent as the MCP server's Tuner (tools/tuning.py): cheap to import, the graph loads on first use."""

from __future__ import annotations

from typing import Any

from worldtune.tools.tuning import TuningRequest


class AgentTuner:
    """Runs tuning jobs in this process with agent.runner (one background thread per run)."""

    def start(self, goal: str, request: TuningRequest) -> str:
        from worldtune.agent import runner
        from worldtune.agent.configuration import TuneOptions

        fields = request.model_dump()
        detach = bool(fields.pop("detach"))
        return runner.start_tuning(goal, TuneOptions(**fields), detach=detach)

    def status(self, run_id: str, db_path: str | None) -> dict[str, Any]:
        from worldtune.agent import runner

        return runner.get_tuning(run_id, db_path)

    def resume(self, run_id: str, approve: bool, db_path: str | None) -> None:
        from worldtune.agent import runner

        runner.resume_tuning(run_id, approve=approve, db_path=db_path)

    def session_ended(self) -> list[str]:
        from worldtune.agent import runner

        return runner.stop_session_runs()
