"""Unit-test settings: offers come from the dated snapshot, whatever SkyPilot catalog a test's HOME holds.

A test that imports SkyPilot through sky/home.py points HOME at a private SkyPilot home for the rest of the
process (SkyPilot fixes its paths at import), and that home's catalog then holds only what the test wrote; a
later test reading offers would see that partial catalog and pass or fail by test order. Tests of the catalog
itself set WORLDTUNE_SKY_CATALOG with monkeypatch, which overrides this.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _offers_from_the_snapshot(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WORLDTUNE_SKY_CATALOG", str(tmp_path_factory.getbasetemp() / "no-catalog"))
        yield
