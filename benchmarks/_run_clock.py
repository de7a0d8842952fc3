"""How long a benchmark took, stamped into the JSON it saves (issue 35 item 5).

Each script under benchmarks/ is its own process and imports this module at its start; `stamped(record)` adds
`run`: the command, when it started (UTC), its wall seconds since then, the CPU seconds of its own process and of
the children it waited for (twins, servers, tune runs), the machine's cores and its load average at the start and
at the end (a figure measured on a loaded machine says so). These are MEASURED on the machine that ran it.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from typing import Any

_STARTED_AT = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
_STARTED = time.monotonic()
_LOAD_AT_START = os.getloadavg()[0]


def stamped(record: dict[str, Any]) -> dict[str, Any]:
    """The record with its run's timing under `run` (replacing an older stamp)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    run = {
        "command": " ".join([os.path.relpath(sys.argv[0]) if sys.argv[0] else "python", *sys.argv[1:]]),
        "started_at": _STARTED_AT,
        "wall_s": round(time.monotonic() - _STARTED, 1),
        "cpu_s": round(own.ru_utime + own.ru_stime, 1),
        "children_cpu_s": round(children.ru_utime + children.ru_stime, 1),
        "cores": os.cpu_count(),
        "load_avg_1m": [round(_LOAD_AT_START, 2), round(os.getloadavg()[0], 2)],
        "clock": "measured: wall and CPU seconds of this benchmark's own run on this machine",
    }
    return {**record, "run": run}
