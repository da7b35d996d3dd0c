"""The compiled GGUF kernels behind argument checks made in Python.

The C++ code checks its arguments too, but an exception thrown from a torch C++ extension crashed
the whole process on one machine we ran on (the GPU machine's image: any ``TORCH_CHECK`` failure in
any extension built there was a segfault, our kernels' and a minimal one's alike). So every input
the kernels would refuse is refused here first, as a ``ValueError`` that names the problem.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from types import ModuleType

import torch

from radixlm.kernels.cpu.gguf_blocks import BLOCK_BYTES, BLOCK_ELEMENTS, GGML_TYPES

REPACK_ENV = "RADIXLM_GGUF_REPACK"  # "0"/"1": groups of eight rows off/on (GGUFKernels.bind)
_BYTES_BY_TYPE = {GGML_TYPES[name]: BLOCK_BYTES[name] for name in GGML_TYPES}
_ELEMENTS_BY_TYPE = {GGML_TYPES[name]: BLOCK_ELEMENTS[name] for name in GGML_TYPES}
# what ``bind`` repacks into groups of eight rows (cpu/gguf_interleave*.cpp)
_REPACKED_TYPES = tuple(GGML_TYPES[name] for name in ("q4_0", "q4_1", "q4_k", "q6_k"))


def check_threads(threads: int | None) -> int:
    """How many threads a kernel may use (the caller's included): ``threads``, default torch's."""
    threads = torch.get_num_threads() if threads is None else threads
    if not isinstance(threads, int) or not 1 <= threads <= 1024:
        raise ValueError(f"threads must be an int in [1, 1024], got {threads!r}")
    return threads


class GGUFKernels:
    """``gguf_linear(x, weight, ggml_type, threads)``: ``x @ W^T`` for Q4_0/Q4_1/Q8_0/Q4_K/Q6_K blocks,
    on the CPU; ``bind(weight, ggml_type)``: the same product for one weight checked once.

    The loops run with the best instruction set of ``available_isas()`` (``"avx2"``, and
    ``"avx512vnni"`` where the CPU has AVX-512 F/BW/VL/VNNI), unless ``RADIXLM_GGUF_ISA=avx2`` is set
    or ``use_isa`` says otherwise; every one computes the same bits."""

    def __init__(self, compiled: ModuleType) -> None:
        self._compiled = compiled

    def available_isas(self) -> list[str]:
        """The instruction sets the loops can use on this CPU, best last."""
        return list(self._compiled.available_isas())

    @property
    def isa(self) -> str:
        """The instruction set the loops use now (process-wide)."""
        return str(self._compiled.current_isa())

    def set_isa(self, isa: str) -> None:
        """Use ``isa`` (one of ``available_isas()``) for every product of this process from now on."""
        if isa not in self.available_isas():
            raise ValueError(f"instruction set {isa!r} is not available here (have {self.available_isas()})")
        self._compiled.set_isa(isa)

    @contextlib.contextmanager
    def use_isa(self, isa: str) -> Iterator[None]:
        """``set_isa(isa)`` for the ``with`` block, then back to the one before (tests, benchmarks)."""
        before = self.isa
        self.set_isa(isa)
        try:
            yield
        finally:
            self._compiled.set_isa(before)

    @contextlib.contextmanager
    def one_pass_chunk_bytes(self, nbytes: int) -> Iterator[None]:
        """Work items of ``nbytes`` of weight for products of at most four activation rows, for the
        ``with`` block (process-wide; a benchmark's knob: ``benchmarks/kernels/gguf_chunks.py``)."""
        if not isinstance(nbytes, int) or nbytes < 1:
            raise ValueError(f"nbytes must be a positive int, got {nbytes!r}")
        before = self._compiled.set_one_pass_chunk_bytes(nbytes)
        try:
            yield
        finally:
            self._compiled.set_one_pass_chunk_bytes(before)

    def read_bytes(self, weight: torch.Tensor, threads: int | None = None) -> int:
        """Read every byte of the 2-D uint8 ``weight`` in the chunks and threads a matrix-vector
        product would, and nothing else: the bandwidth such a product can reach (a benchmark probe).
        Returns a checksum."""
        if (
            weight.dim() != 2
            or weight.dtype != torch.uint8
            or not weight.is_cpu
            or not weight.is_contiguous()
        ):
            raise ValueError(
                f"weight must be a contiguous 2-D uint8 CPU tensor, got {weight.dtype} {tuple(weight.shape)}"
            )
        threads = check_threads(threads)
        return int(self._compiled.read_bytes(weight, threads)) if weight.numel() else 0

    def gguf_linear(
        self, x: torch.Tensor, weight: torch.Tensor, ggml_type: int, threads: int | None = None
    ) -> torch.Tensor:
        """``x``: float32 ``[m, k]``; ``weight``: uint8 ``[n, k / block elements * block bytes]`` (32
        elements per block, 256 for the K-quants); returns float32 ``[m, n]``.
        ``threads``: how many threads may share the product (the caller's included); default torch's.
        A one-off product: Q4_0/Q4_1/Q4_K/Q6_K are repacked (``bind``) only where ``RADIXLM_GGUF_REPACK=1``
        forces it."""
        if x.dim() != 2:
            raise ValueError(f"x must be a 2-D float32 CPU tensor, got {x.dim()}-D {x.dtype} on {x.device}")
        repack = os.environ.get(REPACK_ENV) == "1"
        return self.bind(weight, ggml_type, x.shape[1], repack=repack)(x, threads)

    def repack_by_default(self) -> bool:
        """Whether ``bind`` repacks Q4_0/Q4_1/Q4_K/Q6_K weights into groups of eight rows:
        ``RADIXLM_GGUF_REPACK=0/1`` if set, else on. The grouped products are AVX2 code and win on
        both kinds of machine: against the AVX2 loops at 1-32 rows 1.4-4x for Q4_0, 2-4x for Q4_K,
        1.1-2x for Q6_K (an AVX2-only EPYC); against the AVX-512 VNNI loops 1.3-2.1x for Q4_0, 1.4-2.2x
        for Q4_1, 1.8-2.1x for Q4_K, 1.1-1.7x for Q6_K (a Zen 5 EPYC; benchmarks/kernels/gguf_repack.py,
        benchmarks/log/models-vs-llama-cpp.md)."""
        env = os.environ.get(REPACK_ENV)
        if env in ("0", "1"):
            return env == "1"
        return True

    def bind_rows(self, pieces: list[torch.Tensor], ggml_type: int, in_features: int) -> BoundGGUFProduct:
        """``bind`` for the rows of ``pieces`` stacked in order (an expert's gate rows, then its up rows)
        with no joined copy of the file's blocks where the pieces repack: each piece of whole groups of
        eight rows is repacked alone and the groups joined. Otherwise the pieces are joined (one copy)."""
        if len(pieces) > 1 and all(p.shape[0] % 8 == 0 for p in pieces):
            bound = [self.bind(p, ggml_type, in_features) for p in pieces]
            if all(b.repacked for b in bound):
                n = sum(int(p.shape[0]) for p in pieces)
                packed = torch.cat([b.weight for b in bound])
                return BoundGGUFProduct(self._compiled, packed, ggml_type, in_features, out_features=n)
        return self.bind(pieces[0] if len(pieces) == 1 else torch.cat(pieces), ggml_type, in_features)

    def bind(
        self, weight: torch.Tensor, ggml_type: int, in_features: int, repack: bool | None = None
    ) -> BoundGGUFProduct:
        """The product with ``weight`` (checked now, against ``in_features``), whose calls check only
        their activations: a decode step makes ~120 of them. ``repack`` (default
        ``repack_by_default()``): a Q4_0, Q4_1, Q4_K or Q6_K weight is copied once into groups of
        eight interleaved rows (``cpu/gguf_interleave.cpp``, ``cpu/gguf_interleave_q4_1.cpp``,
        ``cpu/gguf_interleave_k.cpp``: the K-quants' scales decoded) and the product reads only that copy."""
        check_weight(weight, ggml_type, in_features)
        if repack is None:
            repack = self.repack_by_default()
        if repack and ggml_type in _REPACKED_TYPES and weight.shape[0]:
            packed = self._repack(weight, ggml_type)
            n = weight.shape[0]
            return BoundGGUFProduct(self._compiled, packed, ggml_type, in_features, out_features=n)
        return BoundGGUFProduct(self._compiled, weight, ggml_type, in_features)

    def _repack(self, weight: torch.Tensor, ggml_type: int) -> torch.Tensor:
        return self._compiled.repack_groups(weight, ggml_type, check_threads(None))


class BoundGGUFProduct:
    """``x @ W^T`` for one checked weight (``GGUFKernels.bind``); ``x``: float32 ``[m, in_features]``.
    ``out_features`` set: ``weight`` is repacked into groups of eight rows (Q4_0, Q4_1, Q4_K, Q6_K)."""

    __slots__ = ("_compiled", "weight", "ggml_type", "in_features", "out_features")

    def __init__(
        self,
        compiled: ModuleType,
        weight: torch.Tensor,
        ggml_type: int,
        in_features: int,
        out_features: int | None = None,
    ) -> None:
        self._compiled, self.weight = compiled, weight
        self.ggml_type, self.in_features, self.out_features = ggml_type, in_features, out_features

    @property
    def repacked(self) -> bool:
        """Whether the product reads groups of eight rows (not the file's blocks)."""
        return self.out_features is not None

    def __call__(self, x: torch.Tensor, threads: int | None = None) -> torch.Tensor:
        threads = check_threads(threads)
        if x.dim() != 2 or x.dtype != torch.float32 or not x.is_cpu or x.shape[1] != self.in_features:
            raise ValueError(
                f"x must be a 2-D float32 CPU tensor of {self.in_features} columns, got "
                f"{tuple(x.shape)} {x.dtype} on {x.device}"
            )
        if self.out_features is not None:
            return self._compiled.gguf_linear_groups(
                x, self.weight, self.ggml_type, self.out_features, threads
            )
        return self._compiled.gguf_linear(x, self.weight, self.ggml_type, threads)


def check_weight(weight: torch.Tensor, ggml_type: int, k: int) -> None:
    """Raise ``ValueError`` unless ``weight`` is 2-D uint8 CPU blocks of ``ggml_type`` for ``k`` columns."""
    if weight.dim() != 2 or weight.dtype != torch.uint8 or not weight.is_cpu:
        raise ValueError(
            f"weight must be 2-D uint8 blocks on the CPU, got {weight.dim()}-D "
            f"{weight.dtype} on {weight.device}"
        )
    if ggml_type not in _BYTES_BY_TYPE:
        raise ValueError(
            f"unsupported GGML block type {ggml_type} (expected one of {sorted(_BYTES_BY_TYPE)})"
        )
    elements = _ELEMENTS_BY_TYPE[ggml_type]
    if k % elements:
        raise ValueError(
            f"in_features must be a multiple of {elements} for GGML block type {ggml_type}, got {k}"
        )
    if weight.shape[1] != k // elements * _BYTES_BY_TYPE[ggml_type]:
        raise ValueError(
            f"weight row bytes ({weight.shape[1]}) do not match in_features {k} "
            f"for GGML block type {ggml_type}"
        )
