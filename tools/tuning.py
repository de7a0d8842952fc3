"""The tuning agent as the MCP tools see it: a Tuner handed to the server, never an import of agent/.

Dependencies point one way (agent -> tools), yet the server offers start_tuning, get_tuning and
approve_tuning. Whoever builds the server and knows the agent (`worldtune mcp`, the agent's own
in-process client) passes a Tuner; a server built without one refuses those three tools.

A run started over MCP belongs to the session that started it: when the session ends, the server calls
`session_ended` and the run stops and tears down what it started, unless it was started with
detach=true; a detached run goes on in a process of its own, and if that process dies, `worldtune gc`
tears down what it left (the run's heartbeat stops).
"""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field


class TuningRequest(BaseModel):
    """What start_tuning passes on besides the goal text (checked by the MCP tool's schema first)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    infra: str
    engine: str
    twin_profile: str | list[str] | None
    time_scale: float = Field(gt=0)
    budget_usd: float | None = Field(gt=0)
    max_iterations: int = Field(ge=1)
    yes: bool = Field(description="the spend is approved up front")
    db_path: str | None
    detach: bool = Field(default=False, description="the run outlives the MCP session that started it")


class Tuner(Protocol):
    """Starts, follows and resumes tuning runs recorded in the results database."""

    def start(self, goal: str, request: TuningRequest) -> str:
        """Parse the goal (an ambiguous one raises before anything starts), start the run, return its id."""
        ...

    def status(self, run_id: str, db_path: str | None) -> dict[str, Any]:
        """Where the run stands, in TuningStatus's fields."""
        ...

    def resume(self, run_id: str, approve: bool, db_path: str | None) -> None:
        """Answer a run's approval question; it continues (approve) or stops."""
        ...

    def session_ended(self) -> list[str]:
        """The session ended: stop its runs (each tears down what it started) and wait for that; detached
        runs are processes of their own and go on. Returns the ids stopped."""
        ...
