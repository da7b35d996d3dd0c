"""The playground's static files: which URL paths name them and what they hold."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

ASSET_PREFIX = "/ui/"
_NAME = re.compile(r"^[a-z0-9_-]+(/[a-z0-9_-]+)?\.(html|css|js|json|png)$")
CONTENT_TYPES = {
    "html": "text/html; charset=utf-8",
    "css": "text/css; charset=utf-8",
    "js": "text/javascript; charset=utf-8",
    "json": "application/json",
    "png": "image/png",
}
# Only our own files run: inline scripts, eval and other origins are refused by the browser, so
# model output that slipped into the page as HTML still could not execute.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


def is_web_asset(path: str) -> bool:
    """``/`` and ``/ui/<file>`` (not ``/ui/api/...``): served without the API key."""
    name = path[len(ASSET_PREFIX) :]
    return path == "/" or (path.startswith(ASSET_PREFIX) and _NAME.match(name) is not None)


def read_asset(name: str) -> tuple[bytes, str] | None:
    """The bytes and content type of ``static/<name>``, or None when there is no such file."""
    if _NAME.match(name) is None:
        return None
    return _assets().get(name)


@cache
def _assets() -> dict[str, tuple[bytes, str]]:
    root = resources.files("radixlm.web") / "static"
    found: dict[str, tuple[bytes, str]] = {}
    for entry in root.iterdir():
        children = list(entry.iterdir()) if entry.is_dir() else [entry]
        for item in children:
            name = item.name if item is entry else f"{entry.name}/{item.name}"
            if _NAME.match(name):
                found[name] = (item.read_bytes(), CONTENT_TYPES[name.rsplit(".", 1)[1]])
    return found
