"""Shared test settings: SkyPilot never phones home, and nothing touches the user's real homes."""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("SKYPILOT_DISABLE_USAGE_COLLECTION", "1")
# A private cache for the whole test process: dry runs import SkyPilot under a home inside the cache
# (sky/home.py) and offers are read from that home's catalog files, so a shared ~/.cache that another
# process rewrote would change prices mid-suite (test_mcp_server's quotes failed after one did).
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="worldtune-test-cache-")
