"""Where a request's image bytes come from, under the server's limits: data URLs and bare base64
always, local files only under ``--allowed-local-media-path``, http(s) only with
``--allow-image-downloads``. Anything else is a ValueError naming the problem (a 400 at the APIs)."""

from __future__ import annotations

import base64
import binascii
import os
import urllib.request
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ImagePolicy:
    max_images: int = 16
    max_bytes: int = 20 << 20
    local_dir: str | None = None  # None: no file reads
    allow_downloads: bool = False

    @classmethod
    def from_server_args(cls, args: Any, trusted: bool = False) -> ImagePolicy:
        """The server's limits; ``trusted`` (the in-process Engine) may read any local file."""
        local = args.allowed_local_media_path or ("/" if trusted else None)
        return cls(args.max_images_per_request, args.max_image_bytes, local, args.allow_image_downloads)

    def check_count(self, count: int) -> None:
        if count > self.max_images:
            raise ValueError(f"{count} images in one request; this server takes at most {self.max_images}")


def image_bytes(ref: Any, policy: ImagePolicy) -> Any:
    """The image ``ref`` names (bytes, a data URL, base64, a path or file:// URL, an http(s) URL) as
    bytes; a PIL image passes through."""
    if isinstance(ref, (bytes, bytearray)):
        return _sized(bytes(ref), policy)
    if not isinstance(ref, str):
        if type(ref).__module__.startswith("PIL."):
            return ref
        raise ValueError(f"an image must be bytes, a data URL, a path or a URL, not {type(ref).__name__}")
    if ref.startswith("data:"):
        head, sep, body = ref.partition(",")
        if not sep or not head.endswith(";base64"):
            raise ValueError("an image data URL must be data:<type>;base64,<data>")
        return _sized(_b64(body), policy)
    if ref.startswith(("http://", "https://")):
        if not policy.allow_downloads:
            raise ValueError("this server does not fetch image URLs (start it with --allow-image-downloads)")
        with urllib.request.urlopen(ref, timeout=10) as resp:  # noqa: S310 - http(s) only, checked above
            return _sized(resp.read(policy.max_bytes + 1), policy)
    path = ref[len("file://") :] if ref.startswith("file://") else ref
    if os.sep in path or os.path.splitext(path)[1]:
        return _read_local(path, policy)
    return _sized(_b64(ref), policy)


def _read_local(path: str, policy: ImagePolicy) -> bytes:
    if policy.local_dir is None:
        raise ValueError("this server reads no image files (start it with --allowed-local-media-path DIR)")
    real, root = os.path.realpath(path), os.path.realpath(policy.local_dir)
    if os.path.commonpath([real, root]) != root:
        raise ValueError(f"image path {path!r} is outside the allowed directory")
    if not os.path.isfile(real):
        raise ValueError(f"no image file {path!r}")
    if os.path.getsize(real) > policy.max_bytes:
        raise ValueError(f"image {path!r} is larger than {policy.max_bytes} bytes")
    with open(real, "rb") as f:
        return f.read()


def _b64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("an image must be a data URL, base64, a path or a URL") from None


def _sized(data: bytes, policy: ImagePolicy) -> bytes:
    if len(data) > policy.max_bytes:
        raise ValueError(f"an image is larger than this server's limit of {policy.max_bytes} bytes")
    return data
