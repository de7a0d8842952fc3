"""What every device instrument shares: torch on demand, timing, the hardware record, the NCCL environment, the
raw-file writer, and which sizes a run takes.

Runs on a GPU node: PyTorch and the standard library (torch is imported when first needed, so this module and
its callers import without it). Sizes come from the model: imported where worldtune is installed, else from the
JSON file `--sizes FILE` names (see shapes.py and model_sizes.py beside this file).
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import platform
import socket
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import shapes

# NVLink multicast stays off (it can take a shared host's GPUs out of service): the one definition, read by
# `worldtune calibrate` and every instrument, and checked against sky/templates/calibrate.yaml.
MULTICAST_OFF_ENV: dict[str, str] = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
MAKE_SIZES = "python -m worldtune.policies.instruments.model_sizes --out sizes.json"


def torch_module(submodule: str = "") -> Any:
    """torch (or torch.<submodule>), imported when first needed and typed loosely: the GPU images' torch
    version differs from the one type-checked here, and the instruments must import without torch at all."""
    return importlib.import_module(f"torch.{submodule}" if submodule else "torch")


@functools.cache
def sizes_for(path: str | None, variant: str) -> shapes.Sizes:
    """The sizes a run takes: the file `path` names, else the model itself (worldtune installed), else an error
    that says how to make the file."""
    if path:
        return shapes.read(path, variant)
    try:
        from . import model_sizes  # the local side: needs worldtune (and pydantic)
    except ImportError as exc:
        hint = f"pass --sizes FILE, written where worldtune is installed by `{MAKE_SIZES}`"
        raise SystemExit(f"worldtune is not importable here ({exc}): {hint}") from exc
    return shapes.from_document(model_sizes.document([variant]), variant, "worldtune's model (imported)")


def multicast_off() -> None:
    """NVLink multicast off for this process and the ones it starts (a value already set is kept)."""
    for key, value in MULTICAST_OFF_ENV.items():
        os.environ.setdefault(key, value)


# ---- timing -------------------------------------------------------------------------------------------------
def summary(times_ms: list[float]) -> dict[str, Any]:
    return {
        "median_ms": statistics.median(times_ms),
        "min_ms": min(times_ms),
        "max_ms": max(times_ms),
        "reps": len(times_ms),
        "times_ms": [round(t, 5) for t in times_ms],
    }


def time_op(fn: Callable[[], object], device: Any, warmup: int, reps: int) -> list[float]:
    """Milliseconds of each of `reps` back-to-back calls after `warmup` calls: CUDA events on a GPU (one sync at
    the end), a host clock on the CPU."""
    torch = torch_module()
    for _ in range(warmup):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
        for start, end in pairs:
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize(device)
        return [start.elapsed_time(end) for start, end in pairs]
    return _host_times(fn, reps)


def time_synced(fn: Callable[[], object], device: Any, warmup: int, reps: int) -> list[float]:
    """Milliseconds of each timed call, the device synchronised after each one (the mechanism bench's clock)."""
    torch = torch_module()
    for _ in range(warmup):
        fn()
    if device.type != "cuda":
        return _host_times(fn, reps)
    out = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize(device)
        out.append(start.elapsed_time(end))
    return out


def time_loop(fn: Callable[[], object], device: Any, warmup: int, iters: int, repeats: int) -> list[float]:
    """Milliseconds per call of back-to-back loops of `iters` calls (how NCCL tests time collectives)."""
    torch = torch_module()
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize(device)
            start.record()
            for _ in range(iters):
                fn()
            end.record()
            torch.cuda.synchronize(device)
            out.append(start.elapsed_time(end) / iters)
        else:
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            out.append((time.perf_counter() - t0) * 1e3 / iters)
    return out


def _host_times(fn: Callable[[], object], reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


# ---- the run ------------------------------------------------------------------------------------------------
def hardware(device: Any, world: int) -> dict[str, Any]:
    """GPU name and count, driver, torch/CUDA/cuDNN/NCCL versions, the NVLink-multicast settings."""
    torch = torch_module()
    info: dict[str, Any] = {
        "device_type": device.type,
        "world": world,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "host_cpu": platform.processor() or platform.machine(),
        "nccl_env": {k: os.environ.get(k) for k in MULTICAST_OFF_ENV},
    }
    if device.type != "cuda":
        info.update(gpu_name="cpu", gpu_count=0)
        return info
    props = torch.cuda.get_device_properties(device)
    info.update(
        gpu_name=torch.cuda.get_device_name(device),
        gpu_count=torch.cuda.device_count(),
        gpu_memory_gib=round(props.total_memory / 2**30, 1),
        sm_count=props.multi_processor_count,
        cuda=torch.version.cuda,
        cudnn=torch.backends.cudnn.version(),
        nccl=".".join(str(v) for v in nccl) if isinstance(nccl := torch.cuda.nccl.version(), tuple) else str(nccl),
    )
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,power.limit", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        )
        info["nvidia_smi"] = smi.stdout.strip().splitlines()
        info["driver"] = info["nvidia_smi"][0].split(",")[0].strip()
        topo = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=20)
        info["topology"] = topo.stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        info["nvidia_smi_error"] = str(exc)
    return info


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write atomically (a file a run leaves behind is whole: partial results survive a timeout)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
