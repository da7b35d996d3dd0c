"""Images and video frames for ``image(...)`` / ``video(...)``: what a backend sends for each image."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

FRAME_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".gif")


def image_payload(ref: str | bytes | os.PathLike[str]) -> str:
    """An image as a data URL (a local file is read here, on the client; an http(s) or data URL
    goes as it is, for the server to allow or refuse)."""
    if isinstance(ref, (bytes, bytearray)):
        return "data:image;base64," + base64.b64encode(bytes(ref)).decode()
    text = os.fspath(ref)
    if text.startswith(("http://", "https://", "data:")):
        return text
    path = Path(text[len("file://") :] if text.startswith("file://") else text)
    if not path.is_file():
        raise ValueError(f"image(): no file {text!r}")
    return "data:image;base64," + base64.b64encode(path.read_bytes()).decode()


def sample_frames(source: Any, num_frames: int) -> list[Any]:
    """``num_frames`` frames spread evenly over ``source``: a directory of frame images (sorted by
    name) or a list of frames (paths or bytes). No video decoder is bundled, so a video file is a
    ValueError saying to extract its frames first."""
    if num_frames < 1:
        raise ValueError(f"video(): num_frames must be >= 1, got {num_frames}")
    if isinstance(source, (list, tuple)):
        frames = list(source)
    elif os.path.isdir(source):
        frames = sorted(str(p) for p in Path(source).iterdir() if p.suffix.lower() in FRAME_SUFFIXES)
    else:
        raise ValueError(
            f"video(): {source!r} is not a directory of frames or a list of them (no video decoder "
            "is installed: extract the frames first, e.g. ffmpeg -i video.mp4 frames/%04d.png)"
        )
    if not frames:
        raise ValueError(f"video(): no frames in {source!r}")
    if num_frames >= len(frames):
        return frames
    step = len(frames) / num_frames
    return [frames[int(i * step + step / 2)] for i in range(num_frames)]
