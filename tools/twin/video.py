"""Video: write a tiny but valid MP4 of a given size, frame count and fps, and read those facts back from one.

The twin engine answers every request with a real H.264 MP4 (flat grey frames, a few KB) so clients that
decode, probe or save the clip behave as with vLLM-Omni; the benchmark client checks every returned clip
with `check_mp4`, which demuxes the file (PyAV, FFmpeg's libraries) rather than trusting any header we wrote.
Encoding 189 frames of 720p takes well under a second; clips are cached by shape, in each twin and in a folder of
the temporary directory its user owns, so the twins of one machine pay it once.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import stat
import tempfile
from fractions import Fraction
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from worldtune.tools.words.errors import InvalidInput

MAX_SIDE = 4096
# vLLM-Omni 0.30's Cosmos 3 pipeline (diffusion/models/cosmos3/pipeline_cosmos3.py): the causal VAE compresses
# time 4x after the first frame and each side 16x; the latent grid is the floor of side / 16.
VAE_TEMPORAL = 4
VAE_SPATIAL = 16


def served_frames(requested: int) -> int:
    """Frames the pipeline makes for `requested`: rounded up to the next 4k + 1 (`_ceil_video_num_frames`)."""
    if requested <= 1:
        return requested
    return math.ceil((requested - 1) / VAE_TEMPORAL) * VAE_TEMPORAL + 1


def served_size(width: int, height: int) -> tuple[int, int]:
    """The clip's size for a requested one: each side down to a multiple of 16 (`_prepare_latents`: side // 16)."""
    return width // VAE_SPATIAL * VAE_SPATIAL, height // VAE_SPATIAL * VAE_SPATIAL


class VideoInfo(BaseModel):
    """What an MP4 actually holds: frame count, size, frame rate and duration."""

    model_config = ConfigDict(frozen=True)

    frames: int = Field(description="video packets in the file (one per frame)")
    width: int
    height: int
    fps: float
    duration_s: float
    codec: str
    bytes: int

    def mismatches(self, frames: int, width: int, height: int, fps: float) -> list[str]:
        """What differs from the expected clip ([] when it is the clip that was asked for)."""
        wrong = []
        if self.frames != frames:
            wrong.append(f"frames {self.frames} != {frames}")
        if (self.width, self.height) != (width, height):
            wrong.append(f"size {self.width}x{self.height} != {width}x{height}")
        if abs(self.fps - fps) > 1e-3 * max(1.0, fps):
            wrong.append(f"fps {self.fps:g} != {fps:g}")
        return wrong


def make_mp4(width: int, height: int, frames: int, fps: float) -> bytes:
    """A valid H.264 MP4 with exactly `frames` frames of `width` x `height` at `fps` (cached by shape)."""
    if not (2 <= width <= MAX_SIDE and 2 <= height <= MAX_SIDE) or width % 2 or height % 2:
        raise InvalidInput("size", f"{width}x{height}", f"even sides between 2 and {MAX_SIDE} (yuv420p)")
    if frames < 1:
        raise InvalidInput("num_frames", frames, "at least 1")
    if fps < 1:
        raise InvalidInput("fps", fps, "at least 1")
    return _encode(width, height, frames, fps)


CLIP_FORMAT = "h264-ultrafast-grey96-v1"  # what _encode_now writes: a new one names new files


@lru_cache(maxsize=64)
def _encode(width: int, height: int, frames: int, fps: float) -> bytes:
    """The clip of this shape: this process's copy, else the one an earlier twin on this machine encoded (every
    twin encodes its model's default clip while loading: ~0.3 s of CPU a start, a few hundred starts a test run),
    else encoded now and left for the next (written whole, then renamed into place)."""
    path = _clip_path(width, height, frames, fps)
    if path is not None:
        try:
            data = path.read_bytes()
            if data:
                return data
        except OSError:
            pass
    data = _encode_now(width, height, frames, fps)
    if path is not None:
        with contextlib.suppress(OSError):
            part = path.with_name(f"{path.name}.{os.getpid()}.part")
            part.write_bytes(data)
            os.replace(part, path)
    return data


def _clip_path(width: int, height: int, frames: int, fps: float) -> Path | None:
    """Where this user's twins keep encoded clips (a folder of the temporary directory that this user owns and
    only this user can write), or None when there is no such folder."""
    folder = Path(tempfile.gettempdir()) / f"worldtune-twin-clips-{os.getuid()}"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        info = folder.lstat()
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        return None  # a link, or a folder someone else owns or may write: encode instead
    return folder / f"{width}x{height}x{frames}@{fps!r}-{CLIP_FORMAT}.mp4"


def _encode_now(width: int, height: int, frames: int, fps: float) -> bytes:
    import av  # FFmpeg bindings: imported here so the CLI starts fast
    import numpy as np

    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format="mp4") as container:
        # vLLM-Omni takes fps as a float (23.976 is valid); the container needs a rational rate
        stream = container.add_stream("libx264", rate=Fraction(fps).limit_denominator(1001))
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        # ultrafast + zerolatency: no lookahead, no B-frames; flat frames compress to a few bytes each
        stream.options = {"preset": "ultrafast", "tune": "zerolatency"}
        # converted to the stream's yuv420p once: handed rgb24, the encoder converts every frame again (~0.5 s of CPU
        # of a 720p 189-frame clip, at every twin's start: issue 35's profile of the test suite)
        rgb = av.VideoFrame.from_ndarray(np.full((height, width, 3), 96, dtype=np.uint8), format="rgb24")
        frame = rgb.reformat(format="yuv420p")
        for _ in range(frames):
            frame.pts = None  # the encoder numbers each frame it is handed (it set the last one's)
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return buffer.getvalue()


def check_mp4(data: bytes) -> VideoInfo:
    """Read frame count (by demuxing every packet), size and fps back from MP4 bytes; bad bytes raise InvalidInput."""
    import av

    if not data:
        raise InvalidInput("video", "0 bytes", "an MP4 file")
    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            if not container.streams.video:
                raise InvalidInput("video", f"{len(data)} bytes", "an MP4 with a video stream")
            stream = container.streams.video[0]
            packets = sum(1 for packet in container.demux(stream) if packet.size)
            rate = stream.average_rate or stream.guessed_rate or stream.base_rate
            fps = float(rate) if rate else 0.0
            return VideoInfo(
                frames=packets,
                width=stream.codec_context.width,
                height=stream.codec_context.height,
                fps=fps,
                duration_s=packets / fps if fps else 0.0,
                codec=stream.codec_context.name,
                bytes=len(data),
            )
    except av.error.FFmpegError as exc:
        raise InvalidInput("video", f"{len(data)} bytes", "a decodable MP4", str(exc)) from exc
