"""Cosmos 3 model specs: tower shapes, sizes, defaults and what is assumed rather than published."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from worldtune.tools.words.errors import one_of

# The anchor clip (REFERENCE section 4): 720p x 189 frames. Workload's defaults and the performance model's
# scaling anchors read these, so the anchor is written once.
ANCHOR_WIDTH = 1280
ANCHOR_HEIGHT = 720
ANCHOR_FRAMES = 189


class TowerShape(BaseModel):
    """Shape of the diffusion generator tower (the part that runs at every denoising step)."""

    model_config = ConfigDict(frozen=True)

    layers: int
    hidden: int
    q_heads: int
    kv_heads: int
    head_dim: int
    ffn: int = Field(description="SwiGLU intermediate size (three matrices)")

    @property
    def params_per_layer(self) -> int:
        q_dim = self.q_heads * self.head_dim
        kv_dim = self.kv_heads * self.head_dim
        attention = self.hidden * q_dim * 2 + self.hidden * kv_dim * 2  # q, o + k, v
        return attention + 3 * self.hidden * self.ffn

    @property
    def params(self) -> int:
        return self.layers * self.params_per_layer


class ModelSpec(BaseModel):
    """One Cosmos 3 checkpoint as vLLM-Omni serves it."""

    model_config = ConfigDict(frozen=True)

    key: str = Field(description="short name used on the command line, e.g. cosmos3-super")
    hf_id: str
    generator: TowerShape
    reasoner_params_b: float = Field(description="autoregressive tower, billions of parameters")
    other_params_b: float = Field(description="VAE, guard model and the rest, billions of parameters")
    distilled: bool = False
    tasks: tuple[str, ...] = ("t2v", "i2v")
    default_width: int = ANCHOR_WIDTH
    default_height: int = ANCHOR_HEIGHT
    default_frames: int = ANCHOR_FRAMES
    default_fps: int = 24
    default_steps: int = 35
    default_guidance: float = 6.0
    default_flow_shift: float = 10.0
    assumed: tuple[str, ...] = Field(default=(), description="fields not taken from a published source")

    @property
    def generator_params_b(self) -> float:
        return self.generator.params / 1e9

    @property
    def total_params_b(self) -> float:
        return self.generator_params_b + self.reasoner_params_b + self.other_params_b

    @property
    def weights_gib_bf16(self) -> float:
        return self.total_params_b * 1e9 * 2 / 2**30


_SUPER_TOWER = TowerShape(layers=64, hidden=5120, q_heads=64, kv_heads=8, head_dim=128, ffn=25600)

MODELS: dict[str, ModelSpec] = {
    m.key: m
    for m in (
        ModelSpec(
            key="cosmos3-super",
            hf_id="nvidia/Cosmos3-Super",
            generator=_SUPER_TOWER,
            reasoner_params_b=31.2,
            other_params_b=0.2,
            assumed=("other_params_b",),
        ),
        ModelSpec(
            key="cosmos3-super-i2v-4step",
            hf_id="nvidia/Cosmos3-Super-Image2Video-4Step",
            generator=_SUPER_TOWER,
            reasoner_params_b=31.2,
            other_params_b=0.2,
            distilled=True,
            tasks=("i2v",),
            default_steps=4,
            default_guidance=1.0,
            assumed=("other_params_b",),
        ),
        ModelSpec(
            key="cosmos3-nano",
            hf_id="nvidia/Cosmos3-Nano",
            # 8B + 8B is published; the layer shape below is assumed (it reproduces ~7.9B).
            generator=TowerShape(layers=36, hidden=4096, q_heads=32, kv_heads=8, head_dim=128, ffn=14336),
            reasoner_params_b=8.0,
            other_params_b=0.2,
            assumed=("generator", "other_params_b"),
        ),
        ModelSpec(
            key="cosmos3-edge",
            hf_id="nvidia/Cosmos3-Edge",
            # ~4B in all is published; the split and the shape are assumed.
            generator=TowerShape(layers=28, hidden=2048, q_heads=16, kv_heads=8, head_dim=128, ffn=8192),
            reasoner_params_b=2.0,
            other_params_b=0.2,
            default_width=832,
            default_height=480,
            default_guidance=5.0,
            default_flow_shift=3.0,
            assumed=("generator", "reasoner_params_b", "other_params_b"),
        ),
    )
}


def get_model(key: str) -> ModelSpec:
    """The spec for a model key (or its Hugging Face id); a clear error lists the known ones."""
    if key in MODELS:
        return MODELS[key]
    for spec in MODELS.values():
        if spec.hf_id.lower() == key.lower():
            return spec
    raise one_of("model", key, MODELS)
