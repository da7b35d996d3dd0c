"""Read a Hugging Face directory's safetensors checkpoint tensor by tensor."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import torch
from safetensors import safe_open


def safetensors_files(model_dir: str | Path) -> list[Path]:
    """The checkpoint's ``*.safetensors`` files (single or sharded); ValueError if there are none."""
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise ValueError(f"no *.safetensors weights in {model_dir} (other formats are not supported)")
    return files


def iter_safetensors(model_dir: str | Path) -> Iterator[tuple[str, torch.Tensor]]:
    """``(hf_name, tensor)`` for every tensor, read lazily (CPU, checkpoint dtype)."""
    for path in safetensors_files(model_dir):
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                yield name, f.get_tensor(name)
