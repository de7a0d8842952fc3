"""The agent as the MCP server's Tuner (tools/tuning.py): cheap to import, the graph loads on first use."""

from __future__ import annotations

from typing import Any

from worldtune.tools.errors import require_extra
from worldtune.tools.tuning import TuningRequest

# The agent's own imports (LangGraph, its SQLite checkpointer) come with the 'agent' extra. Checked before a run
# is recorded or a thread started, so a bare install answers with what to install instead of a run that dies.
AGENT_MODULES = ("langgraph", "langgraph.checkpoint.sqlite")


class AgentTuner:
    """Runs tuning jobs in this process with agent.runner (one background thread per run)."""

    def start(self, goal: str, request: TuningRequest) -> str:
        for module in AGENT_MODULES:
            require_extra("start_tuning (the tuning agent)", module, "agent")
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
