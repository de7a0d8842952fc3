"""TEST ONLY: a CPU platform for the real vLLM-Omni 0.30.0, so worldtune's tests run the real server without a GPU.

vLLM-Omni 0.30 has platforms for CUDA, ROCm, NPU, XPU and MUSA only, and vLLM's own CPU platform needs kernels the
CUDA wheel lacks. This package plugs a CPU platform in through the supported entry points (`vllm_omni.platform_plugins`
and `vllm.platform_plugins`, declared by the .dist-info folder beside it: putting this folder on PYTHONPATH is the
whole install, the engine's venv is not touched). It activates only where WORLDTUNE_CPU_RANKS is set (the number of
CPU "devices", one per rank), so nothing changes for any other process.

What it must change inside vLLM-Omni 0.30.0 is in `patches.py`, each change named and as small as it could be,
applied through the `vllm_omni.general_plugins` entry point in every engine process.
Nothing here makes timings meaningful: a CPU rank runs the real code paths, not the GPU kernels.
"""

from __future__ import annotations

import os

PLATFORM = "worldtune_cpu_platform.platform.CpuOmniPlatform"
VLLM_PLATFORM = "worldtune_cpu_platform.vllm_platform.CpuPlatform"


def _active() -> bool:
    return bool(os.environ.get("WORLDTUNE_CPU_RANKS"))


def omni_platform() -> str | None:
    return PLATFORM if _active() else None


def patch_engine() -> None:
    """vLLM-Omni's general plugins run in every engine process once vLLM-Omni is imported (the platform itself is
    resolved while it is still being imported, too early to patch its modules)."""
    if _active():
        from worldtune_cpu_platform.patches import apply

        apply()


def vllm_platform() -> str | None:
    return VLLM_PLATFORM if _active() else None
