"""A tuning run in a process of its own: what `start_tuning(detach=true)` starts, so the run outlives the MCP
server and its session (an IDE closing its stdio server escalates to SIGTERM and SIGKILL within seconds).

    python -m worldtune.agent.detached RUN_ID OPTIONS_JSON GOAL_TEXT

The run was recorded before this process started (tools/runs/tuning_jobs.py). The process takes it over (MCP
mark_run running: it owns and heartbeats the run from now on) before the graph starts; SIGTERM, SIGHUP and
SIGINT stop it like Ctrl-C (torn down, recorded interrupted); an error is recorded failed (MCP mark_run), where
get_tuning reads it; if it dies otherwise, `worldtune gc` tears down what it left.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from worldtune.agent.configuration import TuneOptions
from worldtune.agent.runner import tune
from worldtune.tools.runs.run_records import RunMark
from worldtune.tools.runs.stopping import RunStopped


async def _mark(options: TuneOptions, run_id: str, status: RunMark, summary: dict[str, Any] | None = None) -> None:
    """Mark the run through the MCP tools the run itself uses (in-process over its database, or its server)."""
    from worldtune.agent.tools import connect

    async with connect(str(options.db_file()), options.mcp_url) as tools:
        await tools.mark_run(run_id, status, summary)


def main(argv: list[str]) -> int:
    run_id, options_json, goal_text = argv
    options = TuneOptions.model_validate_json(options_json)
    asyncio.run(_mark(options, run_id, "running"))  # this process owns the run from now on
    try:
        tune(goal_text, options, run_id=run_id)
    except RunStopped as exc:
        return 128 + (exc.signum or 2)
    except Exception as exc:  # recorded where get_tuning reads it
        asyncio.run(_mark(options, run_id, "failed", {"error": f"{type(exc).__name__}: {exc}"}))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
