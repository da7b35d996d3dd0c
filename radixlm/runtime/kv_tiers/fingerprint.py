"""What a stored KV page depends on: the model's files and the KV layout."""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from radixlm.runtime.kv_tiers.disk_store import PAGE_TOKENS
from radixlm.runtime.memory.kv_pool import KVPool

_EDGE = 1 << 20  # bytes hashed at each end of a weight file: cheap, and a different file differs there
_WEIGHT_SUFFIXES = (".safetensors", ".gguf", ".bin", ".pt", ".json")


def model_fingerprint(model_path: str | Path, pool: KVPool, disk_dtype: torch.dtype) -> str:
    """A hex digest of the model's weight and config files (name, size, first and last MiB) and of
    the KV layout (layers, KV heads, head dim, pool and stored dtypes, page size)."""
    h = hashlib.sha256()
    path = Path(model_path)
    files = sorted(p for p in path.rglob("*") if p.suffix in _WEIGHT_SUFFIXES) if path.is_dir() else [path]
    for file in files:
        if not file.is_file():
            continue
        size = file.stat().st_size
        h.update(f"{file.name}:{size}".encode())
        with open(file, "rb") as f:
            h.update(f.read(_EDGE))
            if size > 2 * _EDGE:
                f.seek(size - _EDGE)
                h.update(f.read(_EDGE))
    layout = (
        pool.num_layers,
        pool.num_kv_heads,
        pool.head_dim,
        str(pool.dtype),
        str(disk_dtype),
        PAGE_TOKENS,
    )
    h.update(repr(layout).encode())
    return h.hexdigest()
