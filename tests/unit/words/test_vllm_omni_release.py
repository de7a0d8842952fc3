"""The pinned vLLM-Omni release: one place for its version and flag spellings, read by plans and rendering."""

from __future__ import annotations

import pytest

from worldtune.sky import render
from worldtune.tools.words.deployment import Deployment
from worldtune.tools.words.plan import Plan
from worldtune.tools.words.vllm_omni import PINNED, RELEASES, get_release


def test_the_pin_is_a_final_release_and_everything_reads_it() -> None:
    assert PINNED.final and PINNED.version == "0.30.0"
    assert PINNED.version == render.VLLM_OMNI_VERSION and render.VLLM_OMNI_IMAGE == "vllm/vllm-omni:v0.30.0"
    dep = Deployment(gpu="H200", plan="cfg2-u4-hsdp8-fp8", infra="nebius", engine="vllm-omni")
    setup = render._setup(dep, render.RenderOptions(install="pip"))
    assert f"vllm-omni=={PINNED.version}" in setup


def test_fp8_uses_the_quantization_config_flag_not_the_deprecated_alias() -> None:
    # 0.30.0's diffusion/data.py maps `quantization` onto quantization_config as a legacy alias; the flag of its
    # own, --diffusion-quantization-config (a JSON object), is in both 0.30.0 and 0.32.0rc1
    flags = Plan.parse("cfg2-u2-hsdp4-fp8").serve_flags()
    assert flags[-2:] == ["--diffusion-quantization-config", '{"method":"fp8"}'] and "--quantization" not in flags
    dep = Deployment(gpu="H200", plan="cfg2-u2-hsdp4-fp8", infra="nebius", engine="vllm-omni")
    (command,) = render.serve_commands(dep)
    assert '--diffusion-quantization-config \'{"method":"fp8"}\'' in command


@pytest.mark.parametrize("version", sorted(RELEASES))
def test_every_known_release_spells_the_reference_recipe(version: str) -> None:
    release = get_release(version)
    assert Plan.parse("cfg2-u4-hsdp8").serve_flags(release) == [
        "--cfg-parallel-size", "2", "--ulysses-degree", "4", "--use-hsdp", "--hsdp-shard-size", "8",
    ]  # fmt: skip
    assert release.stage_profiler == "--enable-diffusion-pipeline-profiler"


def test_the_next_release_says_what_changes() -> None:
    rc = get_release("0.32.0rc1")
    assert not rc.final and rc.changes and rc.fp8_attention == ("--diffusion-kv-cache-dtype", "fp8")
    assert PINNED.fp8_attention is None  # no FP8 attention on CUDA in 0.30
    with pytest.raises(ValueError, match=r"0\.30\.0"):
        get_release("0.31.0")
