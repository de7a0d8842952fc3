"""Which SkyPilot home worldtune drives, and importing SkyPilot under it (never phoning home).

SkyPilot resolves `~/.sky` (catalogs, state, API-server files) from HOME when it is imported, so the
home must be chosen before the first `import sky` of a process. `$WORLDTUNE_SKY_HOME` names a private
home (tests and the local Slurm cluster use one, so a user's real `~/.sky` is never touched); without
it, dry runs use a private offline home under the user's cache folder and real launches use the
user's own HOME (where their cloud credentials live).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import ModuleType

from worldtune.tools.words.errors import InvalidInput, require_extra

HOME_ENV = "WORLDTUNE_SKY_HOME"


def dryrun_home() -> Path:
    """The private home dry runs use when $WORLDTUNE_SKY_HOME is unset: offline catalog rows only."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "worldtune" / "sky-dryrun-home"


def chosen_home(dry_run: bool) -> Path | None:
    """$WORLDTUNE_SKY_HOME, else the dry-run home for dry runs, else None (the user's own HOME)."""
    override = os.environ.get(HOME_ENV)
    if override:
        return Path(override).expanduser().resolve()
    return dryrun_home() if dry_run else None


def import_skypilot(home: Path | None, what: str = "talking to SkyPilot") -> ModuleType:
    """Import SkyPilot with usage collection off and HOME pointing at `home` (None: leave HOME alone).

    Refuses to switch homes inside one process: SkyPilot has already fixed its paths at import.
    Without the 'sky' extra it raises MissingExtra naming it, before anything is written or started.
    """
    require_extra(what, "sky", "sky")
    os.environ["SKYPILOT_DISABLE_USAGE_COLLECTION"] = "1"
    if home is not None:
        home.mkdir(parents=True, exist_ok=True)
        current = os.environ.get("HOME")
        if "sky" in sys.modules and current and Path(current).resolve() != home.resolve():
            raise InvalidInput(
                "sky home", str(home), f"the home SkyPilot was imported with in this process ({current})"
            )
        os.environ["HOME"] = str(home)
    import sky

    _logs_to_stderr()
    return sky


def _logs_to_stderr() -> None:
    """SkyPilot's loggers write to stdout; worldtune's stdout is for its own answer (`--json`) and, in `worldtune
    mcp`, the MCP protocol itself. A first `sky` call that starts the API server logged "Failed to connect to
    SkyPilot API server ... Starting a local server." there, ahead of `worldtune deploy --json`'s JSON."""
    import logging

    names = [n for n in logging.root.manager.loggerDict if n == "sky" or n.startswith("sky.")]
    for name in ["sky", *names]:
        for handler in logging.getLogger(name).handlers:
            own = type(handler).__module__.startswith("sky.")  # SkyPilot's own handlers, never a caller's (pytest's)
            if own and isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler):
                handler.setStream(sys.stderr)
