"""The twin's clips are encoded once per machine: a twin reads the clip an earlier one left in its user's folder of
the temporary directory, and never one from a folder another user could have written."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from worldtune.tools.twin import video


@pytest.fixture
def temp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setattr(video.tempfile, "gettempdir", lambda: str(tmp_path))
    video._encode.cache_clear()
    yield tmp_path
    video._encode.cache_clear()


def test_a_clip_encoded_once_is_read_back_by_the_next_twin(temp_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = video.make_mp4(64, 48, 9, 24.0)
    info = video.check_mp4(first)
    assert (info.frames, info.width, info.height) == (9, 64, 48)
    (kept,) = (temp_dir / f"worldtune-twin-clips-{video.os.getuid()}").iterdir()
    assert kept.read_bytes() == first and not list(kept.parent.glob("*.part"))
    video._encode.cache_clear()  # another process: nothing in memory

    def refuse(*_: object) -> bytes:
        raise AssertionError("encoded again")

    monkeypatch.setattr(video, "_encode_now", refuse)
    assert video.make_mp4(64, 48, 9, 24.0) == first
    with pytest.raises(AssertionError, match="encoded again"):
        video.make_mp4(64, 48, 13, 24.0)  # another shape: its own file


def test_a_folder_others_may_write_is_never_read(temp_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = temp_dir / f"worldtune-twin-clips-{video.os.getuid()}"
    folder.mkdir()
    folder.chmod(0o777)
    planted = folder / f"64x48x9@24.0-{video.CLIP_FORMAT}.mp4"
    planted.write_bytes(b"not a clip")
    clip = video.make_mp4(64, 48, 9, 24.0)
    assert clip != b"not a clip" and video.check_mp4(clip).frames == 9
    assert planted.read_bytes() == b"not a clip"  # nor written to
