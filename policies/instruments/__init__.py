"""The device instruments: GPU micro-benchmarks and one generator step, in plain PyTorch, and where their sizes
come from.

Every file here but model_sizes.py and step_compare.py runs on a GPU node with PyTorch and the standard library
only (no worldtune: a bare node may have only torch). The sizes they run at are not written in them; they are
the model's (policies/perf_model.py, tools/words/models.py, tools/words/workload.py, tools/words/plan.py), computed by
model_sizes.py: imported where worldtune is installed, or handed to a bare node as the JSON file it writes.

| file | runs | holds |
|---|---|---|
| microbench.py | GPU node | the micro-benchmark's run and command line (what `worldtune calibrate` runs) |
| micro_ops.py | GPU node | its compute sections: linear layers, attention, the card's ceilings |
| micro_comm.py | GPU node | its collectives, checked then timed, whole world and sub-groups |
| mechbench.py | GPU node | the mechanism benchmarks' run and command line, the VAE section |
| mech_attention.py | GPU node | ring chunks + LSE merge, SDPA and FA3 backends, GQA, Ulysses head packing |
| mech_fp8.py | GPU node | FP8 GEMM against BF16, activation quantisation |
| vae_standin.py | GPU node | a Wan-style causal VAE decoder (random weights), vLLM-Omni's patch halo |
| generator_step.py | GPU node | one denoising step under a plan: the run (benchmarks/generator_step.py drives it) |
| step_plan.py | GPU node | the step's plan (degrees from tools/words/plan.py), rank layout, weights and their slices |
| step_runner.py | GPU node | one rank's step: layers, collectives, HSDP prefetch, its communication log |
| devkit.py | GPU node | torch on demand, timing, hardware record, NCCL env, raw-file writer, sizes resolution |
| shapes.py | GPU node | the sizes file's device side: layer shape, collective cases, bus bytes, plans |
| model_sizes.py | here | the sizes from the model; `python -m worldtune.policies.instruments.model_sizes` |
| step_compare.py | here | a measured step beside the model's prediction and the published cells |

On a bare node the folder runs as the package `instruments` (an entry run as a file puts its parent folder on
sys.path), so this file imports nothing.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
LOCAL_ONLY = frozenset({"model_sizes.py", "step_compare.py"})  # they need worldtune: they run here


def device_files() -> list[Path]:
    """The files a bare GPU node needs (PyTorch and the standard library): every module here but LOCAL_ONLY."""
    return sorted(p for p in HERE.glob("*.py") if p.name not in LOCAL_ONLY)
