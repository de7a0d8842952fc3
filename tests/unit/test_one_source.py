"""One source of truth for values that were written several times (issue 16): the anchor clip, the
NVLink-multicast-off environment and the progress callback type. Each is defined once and read elsewhere."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from worldtune.policies import gpu_microbench, perf_model
from worldtune.tools import benchmark, deployment, models
from worldtune.tools.workload import Workload, anchor_workload

ROOT = Path(__file__).resolve().parents[2]
SETS_MULTICAST_OFF = re.compile(r"""["']NCCL_NVLS_ENABLE["']\s*[:,]\s*["']0["']""")


def test_the_anchor_clip_is_written_once() -> None:
    clip = (models.ANCHOR_WIDTH, models.ANCHOR_HEIGHT, models.ANCHOR_FRAMES)
    assert clip == (1280, 720, 189)  # REFERENCE section 4
    default = Workload()
    assert (default.width, default.height, default.num_frames) == clip
    anchor = anchor_workload("cosmos3-super")
    assert (anchor.width, anchor.height, anchor.num_frames) == clip
    assert perf_model.ANCHOR_PIXELS_X_FRAMES == 1280 * 720 * 189


def test_multicast_off_is_defined_once_and_the_task_template_matches_it() -> None:
    template = yaml.safe_load((ROOT / "sky" / "templates" / "calibrate.yaml").read_text())
    assert gpu_microbench.MULTICAST_OFF_ENV.items() <= {k: str(v) for k, v in template["envs"].items()}.items()
    writers = sorted(
        str(path.relative_to(ROOT))
        for room in ("tools", "policies", "sky", "agent", "worldtune", "benchmarks", "scripts")
        for path in (ROOT / room).rglob("*.py")
        if SETS_MULTICAST_OFF.search(path.read_text())
    )
    assert writers == ["policies/gpu_microbench.py"], writers


def test_the_multicast_check_can_fail() -> None:
    assert SETS_MULTICAST_OFF.search('env = {"NCCL_NVLS_ENABLE": "0"}')
    assert SETS_MULTICAST_OFF.search('(("NCCL_NVLS_ENABLE", "0"),)')
    assert not SETS_MULTICAST_OFF.search("hw.get('nccl_env', {}).get('NCCL_NVLS_ENABLE') == '0'")


def test_progress_is_one_type() -> None:
    assert benchmark.Progress is deployment.Progress


def test_validation_errors_have_one_formatter_for_the_cli_and_mcp() -> None:
    import pytest
    from pydantic import ValidationError

    from worldtune.tools import mcp_common
    from worldtune.tools.errors import describe

    with pytest.raises(ValidationError) as caught:
        anchor_workload("cosmos3-super", width=832)  # a worldtune refusal raised inside Workload's validator
    text = describe(caught.value)
    assert text.startswith("size='832x720' is not valid") and "Value error" not in text, text
    assert not hasattr(mcp_common, "validation_message")
