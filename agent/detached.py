"""A tuning run in a process of its own: what `start_tuning(detach=true)` starts, so the run outlives the MCP
server and its session (an IDE closing its stdio server escalates to SIGTERM and SIGKILL within seconds).

    python -m worldtune.agent.detached RUN_ID OPTIONS_JSON GOAL_TEXT

The process owns the run (it heartbeats it); SIGTERM, SIGHUP and SIGINT stop it like Ctrl-C (torn down,
recorded interrupted); if it dies otherwise, `worldtune gc` tears down what it left.
"""

from __future__ import annotations

import sys

from worldtune.agent.configuration import TuneOptions
from worldtune.agent.runner import tune
from worldtune.agent.stopping import RunStopped
from worldtune.tools.store import Store


def main(argv: list[str]) -> int:
    run_id, options_json, goal_text = argv
    options = TuneOptions.model_validate_json(options_json)
    Store(options.db_path).restart_run(run_id)  # this process owns the run from now on
    try:
        tune(goal_text, options, run_id=run_id)
    except RunStopped as exc:
        return 128 + (exc.signum or 2)
    except Exception as exc:  # recorded where get_tuning reads it
        Store(options.db_path).finish_run(run_id, "failed", {"error": f"{type(exc).__name__}: {exc}"})
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
