"""The vLLM-Omni release worldtune targets: its version and the spellings of every serve flag worldtune writes.

One place holds them, so moving the pin is the one line `PINNED = RELEASES[...]`; Plan.serve_flags(),
sky/render.py (image tag, pip pin, serve command) and the tests read this. Flag spellings were read in each
release's wheel (vllm_omni/entrypoints/cli/serve.py, vllm_omni/diffusion/data.py).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from worldtune.tools.words.errors import one_of


class Release(BaseModel):
    """One vLLM-Omni release: version, image, the flags worldtune writes, and what changed from the one before."""

    model_config = ConfigDict(frozen=True)

    version: str
    vllm: str | None = Field(
        default=None,
        description="the vLLM release installed beside it: vllm-omni declares no dependency on vllm, yet `vllm serve "
        "--omni` is the server (None: not read for this release)",
    )
    torch: str | None = Field(default=None, description="the torch release that vLLM pins (None: not read)")
    final: bool = Field(description="a final release (not a release candidate)")
    tensor_parallel: str = "--tensor-parallel-size"
    cfg_parallel: str = "--cfg-parallel-size"
    ulysses: str = "--ulysses-degree"
    ring: str = "--ring-degree"
    use_hsdp: str = "--use-hsdp"
    hsdp_shard: str = "--hsdp-shard-size"
    hsdp_replicate: str = "--hsdp-replicate-size"
    vae_patch_parallel: str = "--vae-patch-parallel-size"
    # `--quantization fp8` still works in both releases but only as a legacy alias that diffusion/data.py moves
    # onto quantization_config; the flag of its own, a JSON object, has been there since 0.30.0.
    fp8: tuple[str, ...] = ("--diffusion-quantization-config", '{"method":"fp8"}')
    attention_backend: str = "--diffusion-attention-backend"
    stage_profiler: str = "--enable-diffusion-pipeline-profiler"
    init_timeout: str = "--init-timeout"
    # Cosmos3's guardrails are on unless the server is started with this (vllm_omni/entrypoints/cli/serve.py): they
    # load a guard model at start (~20 s, from the hub) and check each request; a request's extra_params
    # {"guardrails": false} skips the check but not the load, and cannot turn on what the server did not load
    no_guardrails: str = "--no-guardrails"
    # fp8 attention (Q/K/V precision): on CUDA only from 0.32 (FA3 FP8 kernels, Hopper SM90)
    fp8_attention: tuple[str, ...] | None = None
    changes: tuple[str, ...] = Field(default=(), description="what differs from the release before, as read")

    def guardrail_flags(self, on: bool) -> list[str]:
        """The flags that make a server run Cosmos3's guardrails or not: its default is on, so off must be said (the
        twin takes the same flag with the same default)."""
        return [] if on else [self.no_guardrails]

    def pip_requirements(self) -> list[str]:
        """What `pip install` needs for a working `vllm serve --omni` of this release on a bare host (the same three
        pins scripts/engine-requirements.txt installs for the real-engine tests)."""
        if self.vllm is None or self.torch is None:
            raise ValueError(f"vLLM-Omni {self.version}: the vllm and torch it runs with were not read")
        return [f"vllm-omni=={self.version}", f"vllm=={self.vllm}", f"torch=={self.torch}"]

    @property
    def image(self) -> str:
        return f"vllm/vllm-omni:v{self.version}"


RELEASES: dict[str, Release] = {
    r.version: r
    for r in (
        Release(version="0.30.0", vllm="0.30.0", torch="2.13.0", final=True),
        Release(
            version="0.32.0rc1",
            final=False,
            fp8_attention=("--diffusion-kv-cache-dtype", "fp8"),
            changes=(
                "new serve flags: --hsdp-weight-load-strategy full|pre_sharded, --collect-stage-metrics "
                "(on by default), --enable-cuda-graph-decode, --vae-encode-fast-path; --auxiliary-text-encoder is gone",
                "--diffusion-kv-cache-dtype fp8 runs FlashAttention-3 FP8 kernels on CUDA (SM90 only); "
                "0.30 supports fp8 attention only on other platforms",
                "DiffusionParallelConfig: AllGather-KV composes with Ulysses (not with ring); the sequence-parallel "
                "size is ulysses x ring x allgather; VAE parallel mode 'batch' (needs DP, PP and CFG sizes of 1)",
                "Ray: --worker-backend ray --ray-address exist in both; 0.32 passes stage runtime env to remote "
                "Ray actors (multi-node stages)",
            ),
        ),
    )
}

PINNED = RELEASES["0.30.0"]  # the newest final release on PyPI; moving the pin is this line


def get_release(version: str) -> Release:
    """A known release by version; a clear error lists the known ones."""
    if version in RELEASES:
        return RELEASES[version]
    raise one_of("vllm_omni_version", version, RELEASES)
