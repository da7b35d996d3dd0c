"""A GGUF file as a ``WeightSource``: memory-mapped, each tensor served from the mapping.

Blocks our kernel reads (``NATIVE_TYPES``) come as ``BlockTensor`` views into the mapping (no copy),
except llama.cpp's rope-permuted q/k rows of the ``llama`` architecture, repacked one tensor at a
time. Float tensors come as views (F32/F16); other formats are dequantized one tensor at a time.
"""

from __future__ import annotations

import mmap
import os
import struct
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, ReaderTensor
from gguf.quants import _type_traits, dequantize

from radixlm.runtime.weights.gguf_config import GGUF_ARCHITECTURES, gguf_architecture, hf_config_from_gguf
from radixlm.runtime.weights.gguf_mapping import (
    expert_name,
    fused_parts,
    hf_tensor_name,
    norm_offset,
    unpermute_rope,
)
from radixlm.runtime.weights.source import BlockTensor, StoredTensor

# GGML type names our CPU kernel reads
NATIVE_TYPES = {name: name.lower() for name in ("Q4_0", "Q4_1", "Q5_0", "Q8_0", "Q4_K", "Q6_K")}
_VIEW_TYPES = {GGMLQuantizationType.F32, GGMLQuantizationType.F16}
# what gguf-py dequantizes (BF16, the K-quants, the IQ formats...): its table is the only list of them
READABLE_TYPES = _VIEW_TYPES | set(_type_traits)


class _MetadataReader(GGUFReader):
    """``GGUFReader`` that steps over array fields (the tokenizer's vocabulary and merges) instead of
    making a numpy view per element (seconds per 100k strings); their ``contents()`` are empty. The
    loader reads scalars and tensors only; the tokenizer is built by transformers' own reader."""

    def _get_field_parts(self, orig_offs: int, raw_type: int):  # type: ignore[no-untyped-def]
        if GGUFValueType(raw_type) != GGUFValueType.ARRAY or self.byte_order != "I":
            return super()._get_field_parts(orig_offs, raw_type)
        raw_itype, count = self._get(orig_offs, np.uint32), self._get(orig_offs + 4, np.uint64)
        itype = GGUFValueType(raw_itype[0])
        offs = orig_offs + 12
        if itype == GGUFValueType.STRING:
            view = memoryview(self.data)
            for _ in range(int(count[0])):
                offs += 8 + struct.unpack_from("<Q", view, offs)[0]
        elif itype in self.gguf_scalar_to_np:
            offs += int(count[0]) * np.dtype(self.gguf_scalar_to_np[itype]).itemsize
        else:  # nested arrays: the general walk
            return super()._get_field_parts(orig_offs, raw_type)
        return offs - orig_offs, [raw_itype, count], [], [GGUFValueType.ARRAY, itype]


def open_gguf(path: str, arrays: bool = False) -> GGUFReader:
    """The file's reader (memory-mapped); ValueError naming the file when it is not a readable GGUF
    file, or a tensor's data runs past its end (a truncated download). Array fields are stepped over
    (empty ``contents()``) unless ``arrays``."""
    try:
        reader = GGUFReader(path) if arrays else _MetadataReader(path)
    except Exception as e:  # noqa: BLE001 - gguf-py raises ValueError, IndexError, struct errors...
        raise ValueError(f"{path}: not a readable GGUF file (truncated or corrupt?): {e}") from e
    size = os.path.getsize(path)
    for t in reader.tensors:
        if t.data_offset + t.n_bytes > size or t.data.nbytes != t.n_bytes:
            raise ValueError(
                f"{path}: tensor {t.name!r} ends at byte {t.data_offset + t.n_bytes}, past the end of "
                f"the file ({size} bytes): the file is truncated"
            )
    return reader


def _to_torch(array: np.ndarray) -> torch.Tensor:
    # the mapping is read-only and nothing writes into these tensors (the loader copies or serves them)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(array)


class GGUFSource:
    """The tensors, config and block formats of one GGUF file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.reader = open_gguf(path)
        arch = gguf_architecture(self.reader)
        self._config = hf_config_from_gguf(self.reader)
        self._norm_offset = norm_offset(arch)
        self._permuted = GGUF_ARCHITECTURES[arch][2]
        self._heads = {
            "q_proj": self._config["num_attention_heads"],
            "k_proj": self._config["num_key_value_heads"],
        }
        self._tensors: dict[str, ReaderTensor] = {}
        for t in self.reader.tensors:
            name = hf_tensor_name(t.name, arch)
            if name is None:
                continue
            if t.tensor_type not in READABLE_TYPES:
                raise ValueError(
                    f"{path}: tensor {t.name!r} is stored as {t.tensor_type.name}, which no path reads"
                )
            self._tensors[name] = t
        self._mmap: mmap.mmap | None = getattr(self.reader.data, "_mmap", None)
        # one tensor over the whole mapping: every block tensor is a view of it, so the loader can join
        # a fused layer's parts that lie back to back in the file without copying (``join_rows``)
        self._file = _to_torch(self.reader.data)

    def hf_config(self) -> dict[str, Any]:
        return self._config

    def generation_config(self) -> dict[str, Any]:
        return {}

    def main_format(self) -> str | None:
        counts: dict[str, int] = {}
        for name, t in self._tensors.items():
            if name.endswith("proj.weight"):
                counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
        return NATIVE_TYPES.get(max(counts, key=lambda k: counts[k])) if counts else None

    def tensors(self) -> Iterator[tuple[str, StoredTensor]]:
        for name, t in self._tensors.items():
            if t.data.ndim == 3:  # stacked experts: each expert's [rows, in] a view of the file
                for e in range(t.data.shape[0]):
                    yield expert_name(name, e), self._tensor(name, t, t.data[e])
                continue
            stored = self._tensor(name, t, t.data)
            parts = fused_parts(name, self._config)
            if parts is None:
                yield name, stored
                continue
            if stored.shape[0] != sum(rows for _, rows in parts):
                raise ValueError(
                    f"{self.path}: fused tensor {t.name!r} has {stored.shape[0]} rows; the "
                    f"metadata needs {sum(rows for _, rows in parts)}"
                )
            start = 0
            for part, rows in parts:  # row blocks: whole rows of blocks, still views
                yield part, _rows(stored, start, rows)
                start += rows

    def _tensor(self, name: str, t: ReaderTensor, data: np.ndarray) -> StoredTensor:
        proj = name.split(".")[-2]
        heads = self._heads.get(proj) if self._permuted else None
        fmt = NATIVE_TYPES.get(t.tensor_type.name)
        if fmt is not None and data.ndim == 2:
            in_features = int(t.shape[0])  # GGUF shapes are innermost-first
            if heads is None:
                return BlockTensor(fmt, self._view(data), in_features, lambda: self._release(t))
            # rows are output features and blocks run along the input: unpermuting moves whole rows
            repacked = BlockTensor(fmt, torch.from_numpy(unpermute_rope(data, heads)), in_features)
            self._release(t)
            return repacked
        if self._norm_offset and name.endswith("norm.weight"):
            return torch.from_numpy(dequantize(data, t.tensor_type).astype(np.float32) - self._norm_offset)
        if t.tensor_type in _VIEW_TYPES and heads is None:
            return _to_torch(data)
        array = dequantize(data, t.tensor_type)
        if heads is not None:
            array = unpermute_rope(array, heads)
        self._release(t)
        return torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32))

    def _view(self, data: np.ndarray) -> torch.Tensor:
        """``data`` (a contiguous array in the file's mapping) as a view of ``self._file``."""
        start = data.__array_interface__["data"][0] - self.reader.data.__array_interface__["data"][0]
        if not data.flags.c_contiguous or not 0 <= start <= self._file.numel() - data.nbytes:
            return _to_torch(data)
        return self._file[start : start + data.nbytes].view(data.shape)

    def _release(self, t: ReaderTensor) -> None:
        """Drop the file pages holding ``t`` from this process (they are re-read if touched again)."""
        if self._mmap is None:
            return
        page = mmap.PAGESIZE
        start = -(-t.data_offset // page) * page
        end = (t.data_offset + t.n_bytes) // page * page
        if end > start:
            self._mmap.madvise(mmap.MADV_DONTNEED, start, end - start)


def _rows(stored: StoredTensor, start: int, rows: int) -> StoredTensor:
    """Rows ``start:start+rows`` of a weight (a view)."""
    if isinstance(stored, BlockTensor):
        return BlockTensor(
            stored.fmt, stored.blocks[start : start + rows], stored.in_features, stored.release
        )
    return stored[start : start + rows]
