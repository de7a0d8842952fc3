"""TEST ONLY: vLLM's side of the CPU platform (see the package's docstring). It imports nothing of vLLM-Omni: vLLM
resolves its platform while it is itself being imported, and vLLM-Omni imports vLLM's config."""

from __future__ import annotations

import os
from typing import Any

import torch
from vllm.platforms.interface import Platform, PlatformEnum


def _memory() -> tuple[int, int]:
    """(free, total) bytes of this machine's memory, shared by every CPU rank."""
    pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    free = os.sysconf("SC_AVPHYS_PAGES") * size
    return free, pages * size


class CpuPlatform(Platform):
    _enum = PlatformEnum.OOT
    device_name = "cpu"
    device_type = "cpu"
    dispatch_key = "CPU"
    dist_backend = "gloo"
    simple_compile_backend = "eager"
    device_control_env_var = "WORLDTUNE_CPU_VISIBLE_DEVICES"

    # ---- vLLM's Platform ----------------------------------------------------------------------------------------
    @classmethod
    def get_device_name(cls, device_id: int = 0) -> str:
        return "cpu"

    @classmethod
    def get_device_total_memory(cls, device_id: int = 0) -> int:
        return _memory()[1]

    @classmethod
    def is_fully_connected(cls, device_ids: list[int]) -> bool:
        return True

    @classmethod
    def is_pin_memory_available(cls) -> bool:
        return False

    @classmethod
    def inference_mode(cls) -> Any:
        return torch.no_grad()

    @classmethod
    def set_device(cls, device: torch.device) -> None:
        return None

    @classmethod
    def get_current_memory_usage(cls, device: torch.types.Device | None = None) -> float:
        free, total = _memory()
        return float(total - free)

    @classmethod
    def get_device_communicator_cls(cls) -> str:
        return "vllm.distributed.device_communicators.cpu_communicator.CpuCommunicator"

    @classmethod
    def check_and_update_config(cls, vllm_config: Any) -> None:
        return None

    # ---- torch.cuda's memory calls, which vLLM-Omni makes through the platform (torch.cpu has none) -------------
    @classmethod
    def empty_cache(cls) -> None:
        return None

    @classmethod
    def reset_peak_memory_stats(cls, device: Any = None) -> None:
        return None

    @classmethod
    def max_memory_allocated(cls, device: Any = None) -> int:
        """This process's peak resident memory (what X-Peak-Memory-MB reports here: not a GPU's)."""
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024

    @classmethod
    def max_memory_reserved(cls, device: Any = None) -> int:
        return cls.max_memory_allocated(device)

    @classmethod
    def memory_allocated(cls, device: Any = None) -> int:
        return cls.max_memory_allocated(device)
