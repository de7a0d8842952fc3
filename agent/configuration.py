"""Configuration of one tuning run: where it runs, with what engine, how fast, how much it may spend.

`TuneOptions` is plain data kept in the graph state (so `worldtune resume THREAD_ID` needs nothing
else); `Context` carries what cannot be checkpointed (the MCP client, the progress printer) and is
handed to the graph at run time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from worldtune.agent.events import Events
from worldtune.tools.store.db_path import check_db_path, resolve_db_path
from worldtune.tools.words.limits import MAX_BUDGET_USD

# A 120-s clip takes 120 / 300 = 0.4 s of wall time on the local twin: fast, yet well above the HTTP and
# video-encoding overhead of one request, which the time scale would otherwise magnify into model seconds.
LOCAL_TWIN_TIME_SCALE = 300.0


class TuneOptions(BaseModel):
    """Everything a tuning run needs besides its goal; JSON-serialisable and checkpointed with the state."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    infra: str = Field(default="local", description="local | slurm/NAME | kubernetes | a SkyPilot cloud")
    engine: str = Field(default="twin", description="twin | vllm-omni")
    twin_profile: str | list[str] | None = Field(
        default=None,
        description="what the twin runs with, one profile per GPU type: files or folders of YAML files; "
        "the agent never reads them (the deploy tool says which GPU type each is for)",
    )
    time_scale: float = Field(default=LOCAL_TWIN_TIME_SCALE, gt=0, description="twin only: sleeps divided by it")
    budget_usd: float | None = Field(default=None, gt=0, le=MAX_BUDGET_USD, description="overrides the goal's budget")
    confidence: float | None = Field(
        default=None, gt=0, lt=1, description="overrides the goal's confidence (claim and stopping rule), e.g. 0.99"
    )
    parallel: int = Field(default=1, ge=1, le=8, description="candidates verified at once on separate deployments")
    yes: bool = Field(default=False, description="approve the spend estimate without asking")
    db_path: str | None = Field(default=None, description="results database ($WORLDTUNE_DB or the default)")
    mcp_url: str | None = Field(default=None, description="a remote worldtune MCP server; in-process if unset")
    max_iterations: int = Field(default=30, ge=1, description="most measurements (probes + full runs)")
    margin: float = Field(default=0.03, ge=0, le=0.5, description="an unverified candidate must beat the best by this")
    hold_hours: float = Field(
        default=0.25,
        gt=0,
        description="the least hours each deployment (or replanned node) is asked for; "
        "more when its action is modelled to take longer (verify.lease_hours)",
    )
    reuse_nodes: bool = Field(
        default=True, description="verify the next candidate on a held node of the same offer (replan, warm load)"
    )

    def twin_profiles(self) -> list[str]:
        """The rehearsal's profile files: each file given, and every *.yaml / *.yml in each folder given."""
        given = [self.twin_profile] if isinstance(self.twin_profile, str) else list(self.twin_profile or [])
        files: list[str] = []
        for item in given:
            for part in (p.strip() for p in item.split(",")):
                path = Path(part)
                if part and path.is_dir():
                    files += sorted(str(f) for f in path.iterdir() if f.suffix in (".yaml", ".yml"))
                elif part:
                    files.append(part)
        return files

    @property
    def twin(self) -> bool:
        return self.engine == "twin"

    def db_file(self) -> Path:
        """The results database the run's in-process tools open (db_path, else $WORLDTUNE_DB or the default)."""
        return resolve_db_path(self.db_path)

    def checkpoint_path(self) -> Path:
        """LangGraph checkpoints live next to the results database, in their own file (both checked first)."""
        db = self.db_file()
        return check_db_path(db.with_name(db.stem + "-checkpoints.sqlite"), "db (its checkpoints file)")


def _quiet(kind: str, data: dict[str, Any]) -> None:
    del kind, data


@dataclass
class Context:
    """Run-time things the nodes use and the checkpoint must not hold.

    Every field has a default, so LangGraph Studio / `langgraph dev` can run the graph from its forms with
    no context at all: the tools are then in-process MCP sessions over the results database, and deploy on
    the local twin when the run's options say so (the default). Only plain fields appear in Studio's
    configuration form; the live client and the progress printer are skipped from the JSON schema
    (a callable has none).
    """

    db_path: Annotated[str | None, Field(description="results database of the in-process tools ($WORLDTUNE_DB)")] = None
    mcp_url: Annotated[str | None, Field(description="a remote `worldtune mcp --transport http` URL instead")] = None
    # agent.tools.Tools; given an MCP client session (agent.tools_client.ToolsClient) it is wrapped in McpTools;
    # None: one in-process session per call
    tools: SkipJsonSchema[Any] = None
    progress: SkipJsonSchema[Events] = field(default=_quiet)  # what the run says (agent/events.py)

    def __post_init__(self) -> None:
        from worldtune.agent.tools import typed

        if self.tools is None:
            from worldtune.agent.tools_client import SessionPerCall

            self.tools = SessionPerCall(self.db_path, self.mcp_url)
        self.tools = typed(self.tools)
