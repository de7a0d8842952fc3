"""TEST ONLY: what the CPU platform must change inside vLLM-Omni 0.30.0 (applied once per process, by the platform).

1. `AttentionImpl.forward` dispatches on the platform's name (cuda, hip, npu, xpu, musa) and raises for any other:
   on this platform it takes the CUDA path, which for TORCH_SDPA (the only backend it allows) is plain
   `torch.nn.functional.scaled_dot_product_attention` on whatever device the tensors are on.
2. `torch.accelerator.current_accelerator()`: a CUDA build of torch answers `cuda` on a machine with no driver, and the
   diffusion worker builds its device-to-host side stream from it; here it answers `cpu`.
3. Packing a result into shared memory copies it device-to-host on that side stream into pinned memory; on the CPU the
   tensors are already on the host: the plain synchronous path (d2h_stream=None) is taken.
"""

from __future__ import annotations

import functools
from typing import Any

_applied = False


def cpu_accelerator() -> None:
    """2. the accelerator is the CPU"""
    import torch

    torch.accelerator.current_accelerator = lambda check_available=False: torch.device("cpu")  # type: ignore[assignment]


def apply() -> None:
    global _applied
    if _applied:
        return
    _applied = True
    cpu_accelerator()

    # 1. attention: the CUDA path (plain SDPA) on this platform
    from vllm_omni.diffusion.attention.backends import abstract

    original_forward = abstract.AttentionImpl.forward

    @functools.wraps(original_forward)
    def forward(self: Any, query: Any, key: Any, value: Any, attn_metadata: Any = None) -> Any:
        from vllm_omni.platforms import current_omni_platform

        if current_omni_platform.is_out_of_tree():
            return self.forward_cuda(query, key, value, attn_metadata)
        return original_forward(self, query, key, value, attn_metadata)

    abstract.AttentionImpl.forward = forward  # type: ignore[method-assign]

    # 3. no device-to-host stream: the tensors are on the host
    from vllm_omni.diffusion import ipc

    for name in ("pack_diffusion_output_shm",):
        original = getattr(ipc, name, None)
        if original is None:
            continue

        @functools.wraps(original)
        def host_only(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
            kwargs["d2h_stream"] = None
            return _original(*args, **kwargs)

        setattr(ipc, name, host_only)
        from vllm_omni.diffusion.worker import diffusion_worker

        if getattr(diffusion_worker, name, None) is original:
            setattr(diffusion_worker, name, host_only)
