"""Shared test settings: SkyPilot never phones home, and nothing touches the user's real homes."""

from __future__ import annotations

import os

os.environ.setdefault("SKYPILOT_DISABLE_USAGE_COLLECTION", "1")
