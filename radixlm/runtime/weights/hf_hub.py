"""Hugging Face hub ids (``org/name``, optionally ``org/name@revision``) -> a local snapshot directory.

The user's Hugging Face cache (``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else
``~/.cache/huggingface/hub``, laid out as ``models--org--name/snapshots/<rev>/``) is read first;
when the model is not there and ``HF_HUB_OFFLINE`` is not set, the snapshot is downloaded from the
hub into that cache. Errors say which of the two failed: the user asked to stay offline, or the hub
could not be reached.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

# What a model needs: weights, config, tokenizer and generation config (no other formats).
ALLOW_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken"]
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+(@[\w./-]+)?$")


class ModelUnavailableError(ValueError):
    """A hub model that is neither cached nor downloadable; the message is one line saying what to do."""


def looks_like_hub_id(name: str) -> bool:
    """``org/name`` (with an optional ``@revision``) that is not an existing local path."""
    return bool(_HUB_ID.match(name)) and not Path(name).expanduser().exists()


def hub_cache_dir() -> Path:
    """The hub cache the user's environment names (read at call time, not import time)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface"
    return Path(home).expanduser() / "hub"


def offline_requested() -> bool:
    """True when the user set ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) to a true value."""
    values = (os.environ.get("HF_HUB_OFFLINE", ""), os.environ.get("TRANSFORMERS_OFFLINE", ""))
    return any(v.strip().lower() in ("1", "true", "yes", "on") for v in values)


def cached_snapshot(repo_id: str, revision: str | None = None) -> Path | None:
    """The cached snapshot directory of ``repo_id`` holding a ``config.json``, or None.

    ``revision`` is a branch/tag name (looked up in ``refs/``) or a commit hash; None means the
    ``main`` ref, else the most recently modified snapshot.
    """
    repo_dir = hub_cache_dir() / ("models--" + repo_id.replace("/", "--"))
    snapshots = repo_dir / "snapshots"
    if not snapshots.is_dir():
        return None
    ref = repo_dir / "refs" / (revision or "main")
    if ref.is_file():
        candidate = snapshots / ref.read_text().strip()
        return candidate if (candidate / "config.json").is_file() else None
    if revision is not None:
        candidate = snapshots / revision
        return candidate if (candidate / "config.json").is_file() else None
    found = [d for d in snapshots.iterdir() if (d / "config.json").is_file()]
    return max(found, key=lambda d: d.stat().st_mtime) if found else None


def resolve_hub_model(name: str) -> Path:
    """The local snapshot of hub id ``name``; downloads it when not cached and online.

    Raises ``ModelUnavailableError`` (a ``ValueError``) when the model is not cached and offline was
    requested, or the hub cannot be reached (or refuses).
    """
    repo_id, _, revision = name.partition("@")
    local = cached_snapshot(repo_id, revision or None)
    if local is not None:
        return local
    where = hub_cache_dir()
    if offline_requested():
        raise ModelUnavailableError(
            f"model {repo_id!r} is not in the Hugging Face cache ({where}) and HF_HUB_OFFLINE "
            f"is set, so it is not downloaded; unset HF_HUB_OFFLINE, or download it first "
            f"(huggingface-cli download {repo_id}), or pass a local directory or .gguf file"
        )
    try:
        from huggingface_hub import snapshot_download

        path = snapshot_download(
            repo_id, revision=revision or None, cache_dir=str(where), allow_patterns=ALLOW_PATTERNS
        )
    except Exception as e:  # noqa: BLE001 - connection, auth and not-found errors all end here
        reason = (str(e).strip().splitlines() or [""])[0]
        raise ModelUnavailableError(
            f"model {repo_id!r} is not in the Hugging Face cache ({where}) and could not be "
            f"downloaded from the hub ({type(e).__name__}: {reason}); download it where the hub "
            f"is reachable (huggingface-cli download {repo_id}) into this cache (or point "
            f"HF_HUB_CACHE at one holding it), or pass a local directory or .gguf file"
        ) from e
    if not (Path(path) / "config.json").is_file():
        raise ValueError(f"hub repository {repo_id!r} has no config.json: not a transformers model")
    return Path(path)
