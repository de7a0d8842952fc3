"""Issue 36.2: --mcp-token is for --mcp-url only, goes to the MCP client through $WORLDTUNE_MCP_TOKEN and never
into the run's options (which are checkpointed)."""

from __future__ import annotations

import os

import pytest

from worldtune.agent.configuration import TuneOptions
from worldtune.agent.tools_client import TOKEN_ENV
from worldtune.cli_tune import _use_token
from worldtune.tools.words.errors import InvalidInput


def test_a_token_without_a_url_or_with_spaces_is_refused_and_never_echoed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, "before")  # recorded, so the value _use_token sets is undone after the test
    monkeypatch.delenv(TOKEN_ENV)
    with pytest.raises(InvalidInput, match="only with --mcp-url") as no_url:
        _use_token("s3cret-value", None)
    with pytest.raises(InvalidInput, match="without spaces") as spaced:
        _use_token("s3cret value", "http://127.0.0.1:8765/mcp")
    assert "s3cret" not in str(no_url.value) + str(spaced.value)
    _use_token("s3cret-value", "http://127.0.0.1:8765/mcp")
    assert os.environ[TOKEN_ENV] == "s3cret-value"
    assert "token" not in " ".join(TuneOptions.model_fields)  # nothing of it can reach a checkpoint
