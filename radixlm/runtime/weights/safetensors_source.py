"""A Hugging Face directory's safetensors checkpoint as a ``WeightSource`` (mapped by ``safe_open``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from radixlm.runtime.weights.checkpoint import iter_safetensors
from radixlm.runtime.weights.source import StoredTensor


class SafetensorsSource:
    """``config.json``, ``generation_config.json`` and the ``*.safetensors`` tensors of ``path``, whose
    tensors come one at a time in the checkpoint's dtype (bf16/fp16 converted when copied into place)."""

    def __init__(self, path: str) -> None:
        self.path = path
        config = Path(path) / "config.json"
        if not config.is_file():
            raise ValueError(f"{path} has no config.json")
        self._config = json.loads(config.read_text())

    def hf_config(self) -> dict[str, Any]:
        return self._config

    def generation_config(self) -> dict[str, Any]:
        path = Path(self.path) / "generation_config.json"
        return json.loads(path.read_text()) if path.is_file() else {}

    def main_format(self) -> str | None:
        return None

    def tensors(self) -> Iterator[tuple[str, StoredTensor]]:
        yield from iter_safetensors(self.path)
