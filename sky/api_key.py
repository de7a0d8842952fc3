"""The API key of a deployment's public vLLM-Omni servers: one source for the SkyPilot and Kubernetes backends.

$WORLDTUNE_API_KEY when the user set it, else a key generated at the deployment's first launch and kept,
0600, beside the results database (tools/deployment.api_key_file), where worldtune's benchmark client
(tools/benchmark.auth_headers) and the user's own clients read it. Never printed, logged or rendered into a
file: the rendered task and manifests carry only the secret's name.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from worldtune.tools.words.deployment import Deployment, api_key_file, stored_api_key


def deployment_api_key(results_db: Path, deployment: Deployment) -> str:
    """The deployment's key: the user's, else the one generated for it (created on first use)."""
    found = stored_api_key(results_db, deployment.id)
    if found:
        return found
    path = api_key_file(results_db, deployment.id)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(secrets.token_urlsafe(24))
    return path.read_text().strip()
