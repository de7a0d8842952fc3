"""Run by the REAL ENGINE's Python: write a tiny random-weight checkpoint of Cosmos3's own pipeline to argv[1].

Not NVIDIA's weights (nothing is downloaded): the classes vLLM-Omni 0.30.0 serves Cosmos3 with, at toy sizes, so the
real server loads, runs and answers through Cosmos3's own code path on the CPU. What vLLM-Omni reads of it
(../shared/REAL_ENGINE.md): model_index.json (`_class_name` only: Cosmos3OmniDiffusersPipeline), scheduler/ (UniPC
with flow prediction: not a distilled checkpoint), text_tokenizer/ (Cosmos3 has no separate text encoder),
vae/ (a Wan2.2-style AutoencoderKLWan: z_dim 48 = the transformer's latent_channel, 16x spatial and 4x temporal
compression) and transformer/config.json.

Sizes: 1 layer, hidden 32, head_dim 16, 4 query / 2 KV heads (Ulysses 2 divides them), mrope section [4, 2, 2]
(sums to head_dim / 2), vocabulary 64. About 1.5 MB; seeded, so the same checkpoint every time.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

WORDS = [
    "a",
    "robot",
    "arm",
    "picks",
    "up",
    "red",
    "cube",
    "from",
    "the",
    "table",
    "and",
    "places",
    "it",
    "in",
    "blue",
    "box",
    "slowly",
    "camera",
    "static",
    "warehouse",
    "shelf",
    "moves",
    "forward",
    "car",
    "drives",
    "on",
    "road",
    "at",
    "night",
    "city",
    "street",
    "people",
    "walk",
]
SPECIAL = ["<unk>", "<pad>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }} "
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}"
    "{% endif %}<|im_end|> {% endfor %}{% if add_generation_prompt %}<|im_start|>assistant {% endif %}"
)


def tokenizer():  # type: ignore[no-untyped-def]
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate([*SPECIAL, *dict.fromkeys(WORDS)])}
    assert len(vocab) <= 64, len(vocab)
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=core,
        unk_token="<unk>",
        pad_token="<pad>",
        eos_token="<|endoftext|>",
        additional_special_tokens=SPECIAL[3:],
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build(out: Path) -> None:
    import torch
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler
    from diffusers.models.transformers.transformer_cosmos3 import Cosmos3OmniTransformer
    from diffusers.pipelines.cosmos.pipeline_cosmos3_omni import Cosmos3OmniPipeline

    torch.manual_seed(0)
    transformer = Cosmos3OmniTransformer(
        head_dim=16,
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=1,
        latent_channel=48,
        latent_patch_size=2,
        patch_latent_dim=48 * 2 * 2,
        vocab_size=64,
        rope_axes_dim=[4, 2, 2],
    )
    vae = AutoencoderKLWan(
        base_dim=8,
        z_dim=48,
        dim_mult=[1, 1, 1, 1],
        num_res_blocks=1,
        temperal_downsample=[False, True, True],
        latents_mean=[0.0] * 48,
        latents_std=[1.0] * 48,
        is_residual=True,
        in_channels=12,
        out_channels=12,
        patch_size=2,
        scale_factor_temporal=4,
        scale_factor_spatial=16,
    )
    scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=5.0)
    pipe = Cosmos3OmniPipeline(
        transformer=transformer,
        text_tokenizer=tokenizer(),
        vae=vae,
        scheduler=scheduler,
        safety_checker=None,
        enable_safety_checker=False,
    )
    pipe.save_pretrained(str(out))
    index = out / "model_index.json"
    meta = json.loads(index.read_text())
    meta["_class_name"] = "Cosmos3OmniDiffusersPipeline"  # the name vLLM-Omni's registry serves Cosmos3 under
    index.write_text(json.dumps(meta, indent=2))
    # readable by every user (safetensors are written 0600): a cluster's job user serves it too
    for path in [out, *out.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)


def main() -> None:
    out = Path(sys.argv[1])
    began = time.monotonic()
    build(out)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(json.dumps({"path": str(out), "bytes": size, "seconds": round(time.monotonic() - began, 1)}))


if __name__ == "__main__":
    main()
