"""TEST ONLY: vLLM-Omni's side of the CPU platform (see the package's docstring)."""

from __future__ import annotations

import os

import torch
from vllm_omni.platforms.interface import OmniPlatform, OmniPlatformEnum

from worldtune_cpu_platform.vllm_platform import CpuPlatform, _memory


class CpuOmniPlatform(OmniPlatform, CpuPlatform):
    _omni_enum = OmniPlatformEnum.OOT

    def __init__(self) -> None:
        super().__init__()
        from worldtune_cpu_platform.patches import cpu_accelerator

        cpu_accelerator()  # the rest waits for vLLM-Omni's general plugins (patch_engine): it is being imported

    # ---- vLLM-Omni's OmniPlatform ---------------------------------------------------------------------------------
    @classmethod
    def get_omni_ar_worker_cls(cls) -> str:
        raise NotImplementedError("the test CPU platform serves diffusion pipelines only")

    @classmethod
    def get_omni_generation_worker_cls(cls) -> str:
        raise NotImplementedError("the test CPU platform serves diffusion pipelines only")

    @classmethod
    def get_default_stage_config_path(cls) -> str:
        return "vllm_omni/deploy"

    @classmethod
    def get_diffusion_attn_backend_cls(
        cls, selected_backend: str | None, head_size: int, allow_trtllm_default: bool = False
    ) -> str:
        from vllm_omni.diffusion.attention.backends.registry import DiffusionAttentionBackendEnum

        if selected_backend is not None and selected_backend.upper() != "TORCH_SDPA":
            raise ValueError(f"the test CPU platform runs TORCH_SDPA only, not {selected_backend}")
        return DiffusionAttentionBackendEnum.TORCH_SDPA.get_path()

    @classmethod
    def supports_torch_inductor(cls) -> bool:
        return False

    @classmethod
    def supports_diffusion_dense_flash_attention(cls) -> bool:
        return False

    @classmethod
    def get_torch_device(cls, local_rank: int | None = None) -> torch.device:
        return torch.device("cpu")

    @classmethod
    def get_device_count(cls) -> int:
        return int(os.environ.get("WORLDTUNE_CPU_RANKS", "1"))

    @classmethod
    def get_device_version(cls) -> str | None:
        return None

    @classmethod
    def synchronize(cls) -> None:
        return None

    @classmethod
    def get_free_memory(cls, device: torch.device | None = None) -> int:
        return _memory()[0]

    @classmethod
    def get_device_memory(cls, device: torch.device | None = None) -> tuple[int, int]:
        return _memory()
