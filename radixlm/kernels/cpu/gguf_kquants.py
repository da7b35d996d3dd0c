"""GGUF K-quant super-blocks (Q4_K, Q6_K) in plain torch: the reference dequantizers and a simple quantizer.

A super-block holds 256 weights along K, in the file's byte layout (llama.cpp's ``block_q4_K`` /
``block_q6_K``):

- Q4_K, 144 bytes: fp16 ``d``, fp16 ``dmin``, 12 bytes of eight 6-bit sub-block scales ``sc`` and
  eight 6-bit minimums ``m``, 128 bytes of nibbles. Sub-block ``j`` (32 weights) has value
  ``d * sc[j] * q - dmin * m[j]``. Scale bytes: bytes 0-3 hold ``sc[0..3]`` in their low 6 bits,
  bytes 4-7 ``m[0..3]``; ``sc[4..7]`` and ``m[4..7]`` keep their low 4 bits in bytes 8-11 (scale
  low nibble, minimum high nibble) and their top 2 bits in the top 2 bits of bytes 0-3 (scales) and
  4-7 (minimums). Nibbles: sub-blocks ``2c`` and ``2c + 1`` share bytes ``32c .. 32c + 31``, the
  first in the low nibbles, the second in the high ones.
- Q6_K, 210 bytes: 128 bytes ``ql`` (low 4 bits), 64 bytes ``qh`` (high 2 bits), 16 int8 scales (one
  per 16 weights), fp16 ``d``; value ``d * scale[i // 16] * (q - 32)``. The two halves of 128 weights
  use ``ql[64h:64h+64]`` and ``qh[32h:32h+32]``: weight ``32g + l`` of half ``h`` takes the low
  nibble of ``ql[64h + 32(g % 2) + l]`` for ``g < 2`` and its high nibble for ``g >= 2``, and bits
  ``2g, 2g + 1`` of ``qh[32h + l]`` on top.

``quantize`` rounds from each sub-block's range (min/max for Q4_K, largest magnitude for Q6_K),
simpler than llama.cpp's search for the best scale; it is what ``--quantization q4_k``/``q6_k``
serves from a float checkpoint, while a GGUF file's own blocks are served as stored.
"""

from __future__ import annotations

import torch

SUPER_BLOCK = 256
KQUANT_BYTES = {"q4_k": 144, "q6_k": 210}


def _half(blocks: torch.Tensor, start: int) -> torch.Tensor:
    """fp16 at byte ``start`` of each super-block ``[..., bytes]`` -> float32 ``[..., 1]``."""
    return blocks[..., start : start + 2].contiguous().view(torch.float16).float()


def _halves(values: torch.Tensor) -> torch.Tensor:
    return values.to(torch.float16).view(torch.uint8)


def _safe_inverse(d: torch.Tensor) -> torch.Tensor:
    return torch.where(d != 0, 1.0 / torch.where(d != 0, d, torch.ones_like(d)), torch.zeros_like(d))


def _q4_k_scales(packed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """12 scale bytes ``[..., 12]`` -> (sub-block scales, minimums), int32 ``[..., 8]`` each."""
    p = packed.to(torch.int32)
    low, mid, high = p[..., 0:4], p[..., 4:8], p[..., 8:12]
    scales = torch.cat([low & 63, (high & 0x0F) | ((low >> 6) << 4)], dim=-1)
    mins = torch.cat([mid & 63, (high >> 4) | ((mid >> 6) << 4)], dim=-1)
    return scales, mins


def dequantize(blocks: torch.Tensor, fmt: str) -> torch.Tensor:
    """Super-blocks ``[N, K / 256 * bytes]`` (uint8) -> float32 ``[N, K]``."""
    n = blocks.shape[0]
    b = blocks.reshape(n, -1, KQUANT_BYTES[fmt])
    s = b.shape[1]
    if fmt == "q4_k":
        d, dmin = _half(b, 0), _half(b, 2)
        scales, mins = _q4_k_scales(b[..., 4:16])
        qs = b[..., 16:].to(torch.int32).reshape(n, s, 4, 1, 32)
        q = torch.cat([qs & 0x0F, qs >> 4], dim=3).reshape(n, s, 8, 32).float()
        values = (d * scales.float())[..., None] * q - (dmin * mins.float())[..., None]
        return values.reshape(n, -1)
    ql = b[..., 0:128].to(torch.int32).reshape(n, s, 2, 2, 32)  # [half, which 32 bytes, l]
    qh = b[..., 128:192].to(torch.int32).reshape(n, s, 2, 1, 32)
    low = torch.cat([ql & 0x0F, ql >> 4], dim=3)  # [half, g, l]
    high = (qh >> torch.tensor([0, 2, 4, 6]).reshape(4, 1)) & 3
    q = ((low | (high << 4)) - 32).reshape(n, s, 16, 16).float()
    scales = b[..., 192:208].contiguous().view(torch.int8).float()
    return ((_half(b, 208) * scales)[..., None] * q).reshape(n, -1)


def _pack_q4_k(
    d: torch.Tensor, dmin: torch.Tensor, sc: torch.Tensor, m: torch.Tensor, q: torch.Tensor
) -> torch.Tensor:
    """Parts ``[n, s, ...]`` (``sc``/``m`` int 0..63 ``[n, s, 8]``, ``q`` 0..15 ``[n, s, 8, 32]``)
    -> super-blocks ``[n, s, 144]``."""
    scale_bytes = torch.cat(
        [
            sc[..., :4] | ((sc[..., 4:] >> 4) << 6),
            m[..., :4] | ((m[..., 4:] >> 4) << 6),
            (sc[..., 4:] & 0x0F) | ((m[..., 4:] & 0x0F) << 4),
        ],
        dim=-1,
    ).to(torch.uint8)
    pairs = q.reshape(*q.shape[:2], 4, 2, 32)
    nibbles = (pairs[:, :, :, 0] | (pairs[:, :, :, 1] << 4)).reshape(*q.shape[:2], 128).to(torch.uint8)
    return torch.cat([_halves(d), _halves(dmin), scale_bytes, nibbles], dim=-1)


def _quantize_q4_k(w: torch.Tensor) -> torch.Tensor:
    """float ``[n, s, 256]`` -> ``[n, s, 144]``."""
    sub = w.reshape(*w.shape[:2], 8, 32)
    low = sub.amin(-1).clamp(max=0)  # a minimum above 0 is stored as 0: m is subtracted, never added
    step, floor = (sub.amax(-1) - low) / 15, -low  # [n, s, 8]
    d = (step.amax(-1, keepdim=True) / 63).half().float()
    dmin = (floor.amax(-1, keepdim=True) / 63).half().float()
    sc = (step * _safe_inverse(d)).round().clamp(0, 63).to(torch.int32)
    m = (floor * _safe_inverse(dmin)).round().clamp(0, 63).to(torch.int32)
    eff_step, eff_floor = d * sc.float(), dmin * m.float()
    q = ((sub + eff_floor[..., None]) * _safe_inverse(eff_step)[..., None]).round().clamp(0, 15)
    return _pack_q4_k(d, dmin, sc, m, q.to(torch.int32))


def _quantize_q6_k(w: torch.Tensor) -> torch.Tensor:
    """float ``[n, s, 256]`` -> ``[n, s, 210]``."""
    n, s = w.shape[:2]
    sub = w.reshape(n, s, 16, 16)
    peak = sub.gather(-1, sub.abs().argmax(-1, keepdim=True)).squeeze(-1)
    step = peak / -32  # the largest magnitude maps to -32, as in llama.cpp
    d = (step.abs().amax(-1, keepdim=True) / 127).half().float()
    sc = (step * _safe_inverse(d)).round().clamp(-127, 127)
    q = (sub * _safe_inverse(d * sc)[..., None]).round().clamp(-32, 31).to(torch.int32) + 32
    q = q.reshape(n, s, 2, 4, 32)  # [half, g, l]
    ql = (q[:, :, :, 0:2] & 0x0F) | ((q[:, :, :, 2:4] & 0x0F) << 4)  # g and g + 2 share bytes
    high = q >> 4  # 0..3
    qh = high[:, :, :, 0] | (high[:, :, :, 1] << 2) | (high[:, :, :, 2] << 4) | (high[:, :, :, 3] << 6)
    scales = sc.to(torch.int8).view(torch.uint8)
    return torch.cat(
        [ql.reshape(n, s, 128).to(torch.uint8), qh.reshape(n, s, 64).to(torch.uint8), scales, _halves(d)],
        dim=-1,
    )


def quantize(weight: torch.Tensor, fmt: str) -> torch.Tensor:
    """Float ``[N, K]`` (K a multiple of 256) -> super-blocks ``[N, K / 256 * bytes]``."""
    n, k = weight.shape
    w = weight.detach().float().cpu().reshape(n, k // SUPER_BLOCK, SUPER_BLOCK)
    packed = _quantize_q4_k(w) if fmt == "q4_k" else _quantize_q6_k(w)
    return packed.reshape(n, -1).contiguous()
