"""GGUF (llama.cpp) weight blocks in plain torch: quantize a float matrix, dequantize blocks.

The reference the C++ kernels are tested against, the CUDA path (blocks dequantized at load) and the
embedding lookup (only the looked-up rows are dequantized). A matrix ``[N, K]`` is stored as uint8
``[N, K / 32 * block_bytes]``: each row a run of 32-element blocks along K, in the file's byte layout:

- Q4_0: fp16 ``d``, 16 bytes of nibbles; value = ``(q - 8) * d``.
- Q4_1: fp16 ``d``, fp16 ``m``, 16 bytes of nibbles; value = ``q * d + m``.
- Q5_0: fp16 ``d``, 4 bytes ``qh`` (bit ``j`` of the little-endian uint32: element ``j``'s fifth
  bit), 16 bytes of nibbles; value = ``(q - 16) * d``. llama.cpp writes it for the Q4_K tensors of
  a Q4_K_M file whose rows are not whole 256-weight super-blocks.
- Q8_0: fp16 ``d``, 32 int8; value = ``q * d``.

Nibbles: element ``j`` (0..15) is the low nibble of byte ``j``, element ``j + 16`` its high nibble.

K-quants (Q4_K, Q6_K) store super-blocks of 256 elements; ``gguf_kquants`` holds their layout.
"""

from __future__ import annotations

import torch

from radixlm.kernels.cpu import gguf_kquants

BLOCK = 32
# format name -> GGML type id (the C++ kernel's format argument), bytes per block, elements per block
GGML_TYPES = {"q4_0": 2, "q4_1": 3, "q5_0": 6, "q8_0": 8, "q4_k": 12, "q6_k": 14}
BLOCK_BYTES = {"q4_0": 18, "q4_1": 20, "q5_0": 22, "q8_0": 34, **gguf_kquants.KQUANT_BYTES}
BLOCK_ELEMENTS = {
    fmt: gguf_kquants.SUPER_BLOCK if fmt in gguf_kquants.KQUANT_BYTES else BLOCK for fmt in GGML_TYPES
}


def fits(fmt: str, in_features: int) -> bool:
    """Whether rows of ``in_features`` elements split into whole blocks of ``fmt``."""
    return in_features % BLOCK_ELEMENTS[fmt] == 0


def row_bytes(fmt: str, in_features: int) -> int:
    """Bytes one weight row of ``in_features`` elements takes in ``fmt``."""
    if not fits(fmt, in_features):
        raise ValueError(
            f"{fmt} needs in_features to be a multiple of {BLOCK_ELEMENTS[fmt]}, got {in_features}"
        )
    return in_features // BLOCK_ELEMENTS[fmt] * BLOCK_BYTES[fmt]


def _halves(values: torch.Tensor) -> torch.Tensor:
    """fp32 ``[..., 1]`` -> their fp16 bytes ``[..., 2]``."""
    return values.to(torch.float16).view(torch.uint8)


def _pack_nibbles(q: torch.Tensor) -> torch.Tensor:
    """``[..., 32]`` values 0..15 -> ``[..., 16]`` bytes."""
    return (q[..., :16] | (q[..., 16:] << 4)).to(torch.uint8)


def quantize(weight: torch.Tensor, fmt: str) -> torch.Tensor:
    """Float ``[N, K]`` -> blocks ``[N, row_bytes(fmt, K)]`` (llama.cpp's reference rounding;
    K-quants: ``gguf_kquants.quantize``)."""
    if fmt not in GGML_TYPES:
        raise ValueError(f"unknown block format {fmt!r} (expected one of {', '.join(GGML_TYPES)})")
    n, k = weight.shape
    row_bytes(fmt, k)
    if fmt in gguf_kquants.KQUANT_BYTES:
        return gguf_kquants.quantize(weight, fmt)
    w = weight.detach().float().cpu().reshape(n, k // BLOCK, BLOCK)
    if fmt == "q4_0":
        idx = w.abs().argmax(dim=-1, keepdim=True)
        d = w.gather(-1, idx) / -8.0  # the largest magnitude maps to -8
        inv = torch.where(d != 0, 1.0 / d, torch.zeros_like(d))
        q = (w * inv + 8.5).floor().clamp(0, 15).to(torch.int32)
        parts = [_halves(d), _pack_nibbles(q)]
    elif fmt == "q4_1":
        lo, hi = w.amin(dim=-1, keepdim=True), w.amax(dim=-1, keepdim=True)
        d = (hi - lo) / 15.0
        inv = torch.where(d != 0, 1.0 / d, torch.zeros_like(d))
        q = ((w - lo) * inv + 0.5).floor().clamp(0, 15).to(torch.int32)
        parts = [_halves(d), _halves(lo), _pack_nibbles(q)]
    elif fmt == "q5_0":
        idx = w.abs().argmax(dim=-1, keepdim=True)
        d = w.gather(-1, idx) / -16.0  # the largest magnitude maps to -16
        inv = torch.where(d != 0, 1.0 / d, torch.zeros_like(d))
        q = (w * inv + 16.5).floor().clamp(0, 31).to(torch.int64)
        high = ((q >> 4) << torch.arange(32)).sum(-1, keepdim=True)  # bit j: element j's fifth bit
        qh = torch.stack([(high >> (8 * i)) & 0xFF for i in range(4)], dim=-1).reshape(n, -1, 4)
        parts = [_halves(d), qh.to(torch.uint8), _pack_nibbles(q & 0x0F)]
    else:  # q8_0
        d = w.abs().amax(dim=-1, keepdim=True) / 127.0
        inv = torch.where(d != 0, 1.0 / d, torch.zeros_like(d))
        q = (w * inv).round().clamp(-127, 127).to(torch.int8)
        parts = [_halves(d), q.view(torch.uint8)]
    return torch.cat(parts, dim=-1).reshape(n, -1).contiguous()


def dequantize(blocks: torch.Tensor, fmt: str) -> torch.Tensor:
    """Blocks ``[N, row_bytes]`` (uint8) -> float32 ``[N, K]``."""
    if fmt in gguf_kquants.KQUANT_BYTES:
        return gguf_kquants.dequantize(blocks, fmt)
    n = blocks.shape[0]
    b = blocks.reshape(n, -1, BLOCK_BYTES[fmt])
    d = b[..., 0:2].contiguous().view(torch.float16).float()
    if fmt == "q8_0":
        q = b[..., 2:].contiguous().view(torch.int8).float()
        return (q * d).reshape(n, -1)
    offset = {"q4_0": 2, "q4_1": 4, "q5_0": 6}[fmt]
    qs = b[..., offset : offset + 16].to(torch.int32)
    q = torch.cat([qs & 0x0F, qs >> 4], dim=-1).float()
    if fmt == "q5_0":
        qh = b[..., 2:6].to(torch.int64)
        bits = qh[..., 0:1] | (qh[..., 1:2] << 8) | (qh[..., 2:3] << 16) | (qh[..., 3:4] << 24)
        high = ((bits >> torch.arange(32)) & 1).float()
        return ((q + 16.0 * high - 16.0) * d).reshape(n, -1)
    if fmt == "q4_0":
        return ((q - 8.0) * d).reshape(n, -1)
    m = b[..., 2:4].contiguous().view(torch.float16).float()
    return (q * d + m).reshape(n, -1)
