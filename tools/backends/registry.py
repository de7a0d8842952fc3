"""Which Backend hosts an infra: the one table naming all three backends, by module, imported only when used.

    "local"                  -> tools/backends/local.py LocalBackend (twin processes on this machine)
    "slurm/<name>", a cloud  -> sky/backend.py SkyPilotBackend
    "kubernetes"             -> sky/kubernetes.py KubernetesBackend

The SkyPilot and Kubernetes backends stay in sky/ (ARCHITECTURE.md: sky/ has no __init__.py, so it never shadows
SkyPilot's `sky`, and imports only the words); naming them here by module string keeps SkyPilot out of every
process that does not use it. tools/deployments/deploy.py `backend_for` builds the backend this table names.
"""

from __future__ import annotations

import importlib
from typing import Any

LOCAL_BACKEND = ("worldtune.tools.backends.local", "LocalBackend")
SKY_BACKEND = ("worldtune.sky.backend", "SkyPilotBackend")
K8S_BACKEND = ("worldtune.sky.kubernetes", "KubernetesBackend")


def backend_named(kind: str) -> tuple[str, str]:
    """(module, class) of the backend for an infra kind (Infra.parse(infra).kind: local, kubernetes, slurm, cloud);
    read at call time, so a test can point a kind at a stand-in."""
    return {"local": LOCAL_BACKEND, "kubernetes": K8S_BACKEND}.get(kind, SKY_BACKEND)


def backend_class(kind: str) -> Any:
    """The backend class for an infra kind, imported now (ImportError or AttributeError if it cannot be)."""
    module_name, class_name = backend_named(kind)
    return getattr(importlib.import_module(module_name), class_name)
