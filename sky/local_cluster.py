"""How jobs on the local Slurm cluster run this very worldtune installation: a bridge venv of the system Python.

The local Slurm "cluster" is this machine, so its jobs could run the project's own venv, but they run
as Slurm's job user, who usually cannot execute this venv's interpreter (a venv's python is a link
to the interpreter it was made from, here under root's home). The job user can read the installed
packages, though: the bridge is a venv of the system Python (same minor version) whose one `.pth`
file adds this installation's site-packages, editable worldtune included. Jobs run
`<bridge>/bin/python -m worldtune.cli ...`. `$WORLDTUNE_CLUSTER_PYTHON` names another Python on the
cluster that can import worldtune (then no bridge is made).
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

from worldtune.tools.words.errors import InvalidInput

PYTHON_ENV = "WORLDTUNE_CLUSTER_PYTHON"
SYSTEM_PYTHON = "/usr/bin/python3"
PTH_NAME = "worldtune-bridge.pth"


def bridge_dir() -> Path:
    """Next to the project's venv (<repo>/.cache/cluster-venv), else under the user's cache folder."""
    repo = Path(sys.prefix).resolve().parent
    if (repo / "pyproject.toml").is_file():
        return repo / ".cache" / "cluster-venv"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "worldtune" / "cluster-venv"


def ensure_bridge(folder: Path | None = None, system_python: str = SYSTEM_PYTHON) -> Path:
    """Create (idempotently) the bridge venv and return its python."""
    target = folder or bridge_dir()
    python = target / "bin" / "python"
    version = subprocess.run(
        [system_python, "-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ours = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if version != ours:
        raise InvalidInput(
            "cluster python", system_python, f"a Python {ours} like this installation's", f"set ${PYTHON_ENV}"
        )
    if not python.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([system_python, "-m", "venv", "--without-pip", str(target)], check=True)
    pth = target / "lib" / f"python{version}" / "site-packages" / PTH_NAME
    line = f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n"
    if not pth.is_file() or pth.read_text() != line:
        pth.write_text(line)
    for path in (target, *target.parents[:2]):  # the job user must reach and read it
        path.chmod(path.stat().st_mode | 0o055)
    return python


def cluster_python() -> str:
    """The Python a local-cluster job runs worldtune with ($WORLDTUNE_CLUSTER_PYTHON or the bridge)."""
    return os.environ.get(PYTHON_ENV) or str(ensure_bridge())
