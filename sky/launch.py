"""What a SkyPilot launch and the serve job on its cluster share: their errors, the time a launch may take, when
the cluster downs itself, and how a job id and a record's fields are read back (sky/backend.py, sky/serve_job.py).
"""

from __future__ import annotations

import math
import os
from typing import Any

from worldtune.tools.words.deployment import Deployment
from worldtune.tools.words.errors import InvalidInput, WorldtuneError

# How long `sky launch` (provisioning + setup) and the serve job's `sky exec` may take before worldtune
# cancels the request and tears the cluster down: a hung launch must not hold a node (or a caller) forever.
LAUNCH_TIMEOUT_ENV = "WORLDTUNE_SKY_LAUNCH_TIMEOUT_S"
DEFAULT_LAUNCH_TIMEOUT_S = 1800.0


class LaunchError(WorldtuneError, RuntimeError):
    """A cluster or its servers did not come up."""


class RequestTimeout(LaunchError):
    """A SkyPilot request did not finish in the time allowed; it was cancelled."""


def launch_timeout_s() -> float:
    """$WORLDTUNE_SKY_LAUNCH_TIMEOUT_S (seconds), else 30 minutes."""
    raw = os.environ.get(LAUNCH_TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_LAUNCH_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise InvalidInput(LAUNCH_TIMEOUT_ENV, raw, "a number of seconds greater than 0")
    return value


def hard_down_minutes(deployment: Deployment, allowance_s: int) -> int:
    """Minutes after the serve job starts at which SkyPilot downs the cluster: the start-up allowance `allowance_s`
    (SkyPilotBackend.allowance_s) + hours asked."""
    hours = deployment.hold_hours or 0.0
    return max(1, math.ceil(allowance_s / 60.0 + hours * 60.0))


def field_of(record: Any, name: str) -> Any:
    return record.get(name) if isinstance(record, dict) else getattr(record, name, None)
