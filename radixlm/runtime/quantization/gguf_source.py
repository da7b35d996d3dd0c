"""Raw GGUF weight blocks under our model's parameter names, for serving a GGUF file natively."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from gguf import GGUFReader

from radixlm.runtime.weights.gguf_config import GGUF_ARCHITECTURES, gguf_architecture, gguf_field
from radixlm.runtime.weights.gguf_mapping import hf_tensor_name, unpermute_rope
from radixlm.runtime.weights.model_registry import ALIASES, KNOWN_MODELS, known_model_gguf

# GGML type names our CPU kernel reads
NATIVE_TYPES = {name: name.lower() for name in ("Q4_0", "Q4_1", "Q5_0", "Q8_0", "Q4_K", "Q6_K")}


def gguf_path_of(model: str) -> Path | None:
    """The GGUF file behind ``model`` (a known model name or a .gguf path), else None."""
    name = ALIASES.get(model, model)
    if name in KNOWN_MODELS:
        return known_model_gguf(name)
    path = Path(model).expanduser()
    return path.resolve() if path.suffix == ".gguf" and path.is_file() else None


class GGUFBlocks:
    """The block tensors of one GGUF file, by Hugging Face name, rope permutation undone."""

    def __init__(self, path: Path) -> None:
        self.reader = GGUFReader(str(path))
        arch = gguf_architecture(self.reader)
        self._permuted = GGUF_ARCHITECTURES[arch][2]
        self._heads = {
            "q_proj": int(gguf_field(self.reader, f"{arch}.attention.head_count")),
            "k_proj": int(
                gguf_field(
                    self.reader,
                    f"{arch}.attention.head_count_kv",
                    gguf_field(self.reader, f"{arch}.attention.head_count"),
                )
            ),
        }
        self._tensors = {}
        for t in self.reader.tensors:
            name = hf_tensor_name(t.name)
            if name is not None:
                self._tensors[name] = t

    def main_format(self) -> str | None:
        """The block format of most linear weights (what the file "is"), when our kernel reads it."""
        counts: dict[str, int] = {}
        for name, t in self._tensors.items():
            if name.endswith("proj.weight"):
                counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
        if not counts:
            return None
        return NATIVE_TYPES.get(max(counts, key=lambda k: counts[k]))

    def type_name(self, hf_name: str) -> str | None:
        """The GGML type a tensor is stored in (``Q4_K``, ``F32``...), None when the file lacks it."""
        t = self._tensors.get(hf_name)
        return None if t is None else t.tensor_type.name

    def blocks(self, hf_name: str) -> tuple[str, torch.Tensor] | None:
        """(format, uint8 blocks ``[out, row_bytes]``) for a weight stored in a native type, else None.

        llama.cpp stores q_proj/k_proj rows rope-permuted per head; rows are output features and the
        blocks run along the input dimension, so undoing it reorders whole rows of blocks.
        """
        t = self._tensors.get(hf_name)
        if t is None or t.tensor_type.name not in NATIVE_TYPES:
            return None
        array = np.asarray(t.data)
        proj = hf_name.split(".")[-2]
        if self._permuted and proj in self._heads:
            array = unpermute_rope(array, self._heads[proj])
        return NATIVE_TYPES[t.tensor_type.name], torch.from_numpy(np.array(array, copy=True))
