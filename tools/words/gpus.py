"""GPU types worldtune knows: memory, datasheet rates and links (the physics priors of a Profile)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from worldtune.tools.words.errors import one_of


class GpuSpec(BaseModel):
    """Datasheet facts of one accelerator type."""

    model_config = ConfigDict(frozen=True)

    name: str
    memory_gib: float  # usable, as the driver reports it
    bf16_tflops: float  # dense, datasheet
    fp8_tflops: float
    link_gbps: float  # NVLink per direction, GB/s
    max_gpus_per_node: int = 8
    skypilot_name: str = ""

    @property
    def sky_accelerator(self) -> str:
        return self.skypilot_name or self.name


GPUS: dict[str, GpuSpec] = {
    g.name: g
    for g in (
        # 143,771 MiB and 183,359 MiB are what nvidia-smi reports for H200 and B200.
        GpuSpec(name="H200", memory_gib=140.4, bf16_tflops=989, fp8_tflops=1979, link_gbps=450),
        GpuSpec(name="B200", memory_gib=179.1, bf16_tflops=2250, fp8_tflops=4500, link_gbps=900),
        GpuSpec(name="H100", memory_gib=79.6, bf16_tflops=989, fp8_tflops=1979, link_gbps=450),
        GpuSpec(name="B300", memory_gib=268.0, bf16_tflops=2250, fp8_tflops=4500, link_gbps=900),
    )
}


def get_gpu(name: str) -> GpuSpec:
    """The spec for a GPU name (case-insensitive); a clear error lists the known ones."""
    for key, spec in GPUS.items():
        if key.lower() == name.lower():
            return spec
    raise one_of("gpu", name, GPUS)
