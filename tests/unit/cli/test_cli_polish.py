"""The command line as a newcomer meets it: --version, -h, readable help, and refusals in words (issue 15)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from worldtune import __version__
from worldtune.tools.words.errors import MissingExtra, describe, require_extra
from worldtune.tools.words.workload import anchor_workload

WORLDTUNE = str(Path(sys.executable).parent / "worldtune")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "COLUMNS": "200", "SKYPILOT_DISABLE_USAGE_COLLECTION": "1"}
    return subprocess.run([WORLDTUNE, *args], capture_output=True, text=True, timeout=60, env=env)


def test_version_and_short_help() -> None:
    version = run("--version")
    assert version.returncode == 0 and version.stdout.strip() == f"worldtune {__version__}"
    short = run("-h")
    assert short.returncode == 0 and "Commands" in short.stdout and "estimate" in short.stdout
    sub = run("estimate", "-h")
    assert sub.returncode == 0 and "--plan" in sub.stdout


def test_help_shows_no_value_type_beside_flags() -> None:
    text = run("estimate", "--help").stdout
    assert "<bool>" not in text, text
    assert "<str>" in text  # options that take a value still say what kind
    assert "<bool>" not in run("tune", "--help").stdout


def test_schema_errors_read_as_field_value_and_rule() -> None:
    out = run("estimate", "--plan", "tp8", "--steps", "0")
    assert out.returncode == 2
    assert "steps=0 is not valid" in out.stderr and "greater than or equal to 1" in out.stderr
    assert "validation error" not in out.stderr and "errors.pydantic.dev" not in out.stderr


def test_twin_refuses_a_port_out_of_range_without_a_traceback() -> None:
    out = run("twin", "--port", "99999")
    assert out.returncode == 2 and "port=99999 is not valid" in out.stderr and "Traceback" not in out.stderr
    two = run("twin", "--plan", "2xcfg2-u2-hsdp4", "--port", "65535")
    assert two.returncode == 2 and "port=65535" in two.stderr


def test_twin_refuses_a_plan_vllm_omni_refuses() -> None:
    out = run("twin", "--plan", "tp3")
    assert out.returncode == 2, out.stderr
    assert "plan='tp3' is not valid" in out.stderr and "tensor parallel" in out.stderr


def test_install_hints_keep_their_brackets() -> None:
    # Rich must not read [calibrate] in a message as a style tag and drop it
    code = (
        "from worldtune.cli import fail\nfrom worldtune.tools.words.errors import MissingExtra\n"
        "fail(MissingExtra('worldtune calibrate', 'torch', 'calibrate'))\nfail('use [bold] literally')"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert "pip install 'worldtune[calibrate]'" in proc.stderr, proc.stderr
    assert "use [bold] literally" in proc.stderr


def test_require_extra_names_the_extra() -> None:
    require_extra("anything", "json", "agent")  # present: no error
    with pytest.raises(MissingExtra) as caught:
        require_extra("worldtune tune", "no_such_module_for_worldtune", "agent")
    assert "pip install 'worldtune[agent]'" in str(caught.value) and "worldtune tune" in str(caught.value)
    with pytest.raises(MissingExtra):
        require_extra("x", "no_such_parent.child", "sky")


def test_describe_turns_pydantic_errors_into_words() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as caught:
        anchor_workload("cosmos3-super", steps=0, fps=7)
    text = describe(caught.value)
    assert "steps=0 is not valid" in text and "fps=7 is not valid" in text
    assert describe(ValueError("plain")) == "plain"
