"""Where the results database lives, resolved without opening it (the agent's checkpoints sit beside it).

Stdlib only: the agent reads this path (agent/configuration.py) while it reaches the database itself only
through the MCP tools; tools/store/schema.py opens the file at the same path.
"""

from __future__ import annotations

import os
from pathlib import Path

DB_ENV = "WORLDTUNE_DB"


def default_db_path() -> Path:
    """$WORLDTUNE_DB, else $XDG_DATA_HOME/worldtune/worldtune.db (~/.local/share/... by default)."""
    override = os.environ.get(DB_ENV)
    if override:
        return Path(override)
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "worldtune" / "worldtune.db"
