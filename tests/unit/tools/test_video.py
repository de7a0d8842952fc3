"""The twin's MP4s are real: frame count, size and fps read back by demuxing, and bad bytes are refused."""

from __future__ import annotations

import pytest

from worldtune.tools.twin.video import check_mp4, make_mp4
from worldtune.tools.words.errors import InvalidInput


@pytest.mark.parametrize(
    ("width", "height", "frames", "fps"), [(1280, 720, 189, 24), (832, 480, 61, 16), (256, 256, 5, 30)]
)
def test_written_clip_reads_back_exactly(width: int, height: int, frames: int, fps: int) -> None:
    data = make_mp4(width, height, frames, fps)
    assert data[4:8] == b"ftyp"  # an ISO base media file
    info = check_mp4(data)
    assert (info.frames, info.width, info.height, info.fps) == (frames, width, height, float(fps))
    assert info.codec == "h264"
    assert info.duration_s == pytest.approx(frames / fps)
    assert info.mismatches(frames, width, height, fps) == []


def test_mismatches_name_what_differs() -> None:
    info = check_mp4(make_mp4(320, 256, 9, 10))
    wrong = info.mismatches(13, 256, 320, 24)
    assert wrong == ["frames 9 != 13", "size 320x256 != 256x320", "fps 10 != 24"]


def test_clips_are_cached_by_shape() -> None:
    assert make_mp4(256, 256, 5, 10) is make_mp4(256, 256, 5, 10)


@pytest.mark.parametrize("data", [b"", b"not a video at all", make_mp4(256, 256, 5, 10)[:200]])
def test_bad_bytes_are_refused(data: bytes) -> None:
    with pytest.raises(InvalidInput):
        check_mp4(data)


def test_odd_sizes_are_refused() -> None:
    with pytest.raises(InvalidInput, match="even sides"):
        make_mp4(255, 256, 5, 10)
