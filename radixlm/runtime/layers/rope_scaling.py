"""Rotary frequencies of every rope variant we serve, and the per-position cos/sin table built from them.

``scaling`` is the normalized dict ``ModelConfig`` produces (``models/config.py`` ``_rope``): a
``rope_type`` of ``linear``, ``llama3``, ``yarn``, ``longrope``, ``dynamic`` or ``freq_factors``, its
parameters (``factor`` and ``original_max_position_embeddings`` always filled where the type uses
them), and ``partial_rotary_factor`` when only the first part of each head is rotated. The formulas
follow transformers' ``ROPE_INIT_FUNCTIONS`` (``freq_factors``: llama.cpp's ``rope_freqs`` tensor).

LongRoPE and dynamic NTK pick their frequencies by sequence length. A paged server decides per token,
by the token's own position: the row for position ``p`` holds what transformers uses for a forward
whose last position is ``p`` (LongRoPE: short factors below ``original_max_position_embeddings``, long
ones from there on; dynamic: the base stretched for length ``max(p + 1, max_position_embeddings)``).
So a token's K/V depends only on its prefix (radix reuse, chunked prefill and batch composition never
change a result), everything within the original context equals transformers exactly, and beyond it
we equal transformers run one token at a time on its cache. A transformers forward over a whole longer
sequence (and Phi-3's ``generate``, which re-encodes the sequence once it crosses the original length)
instead rotates every position with the long factors.
"""

from __future__ import annotations

import math
from typing import Any

import torch

SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3", "yarn", "longrope", "dynamic", "freq_factors")


def rope_type_of(scaling: dict[str, Any] | None) -> str:
    return (scaling or {}).get("rope_type") or (scaling or {}).get("type") or "default"


def rotary_dim(head_dim: int, scaling: dict[str, Any] | None) -> int:
    """How many leading dims of each head are rotated: ``head_dim * partial_rotary_factor``."""
    dim = int(head_dim * float((scaling or {}).get("partial_rotary_factor") or 1.0))
    if dim <= 0 or dim % 2 or dim > head_dim:
        raise ValueError(
            f"rotary dim {dim} (head_dim {head_dim} x partial_rotary_factor) must be even, in (0, {head_dim}]"
        )
    return dim


def rope_inv_freq(head_dim: int, theta: float, scaling: dict[str, Any] | None) -> torch.Tensor:
    """Inverse frequencies ``[rotary_dim / 2]`` (fp32) for the rope variant in ``scaling`` (LongRoPE:
    the short factors; dynamic: the unstretched base, as transformers at load)."""
    rope_type = rope_type_of(scaling)
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise ValueError(
            f"unsupported rope scaling type {rope_type!r} (supported: {', '.join(SUPPORTED_ROPE_TYPES)})"
        )
    dim = rotary_dim(head_dim, scaling)
    inv_freq = _default_inv_freq(dim, theta)
    if rope_type in ("default", "dynamic"):
        return inv_freq
    assert scaling is not None
    if rope_type == "linear":
        return inv_freq / float(_param(scaling, "factor"))
    if rope_type == "llama3":
        return _llama3_inv_freq(inv_freq, scaling)
    if rope_type == "yarn":
        return _yarn_inv_freq(dim, theta, scaling)
    if rope_type == "longrope":
        return inv_freq / _factors(scaling, "short_factor", dim)
    return inv_freq / _factors(scaling, "factors", dim)


def rope_attention_factor(scaling: dict[str, Any] | None) -> float:
    """The factor transformers multiplies cos and sin by (YaRN's mscale, LongRoPE's length correction;
    1 for the other types)."""
    rope_type = rope_type_of(scaling)
    if rope_type not in ("yarn", "longrope"):
        return 1.0
    assert scaling is not None
    if scaling.get("attention_factor") is not None:
        return float(scaling["attention_factor"])
    factor = float(_param(scaling, "factor"))
    if rope_type == "longrope":
        orig = float(_param(scaling, "original_max_position_embeddings"))
        return 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(orig))
    mscale, mscale_all_dim = scaling.get("mscale"), scaling.get("mscale_all_dim")
    if mscale and mscale_all_dim:
        return float(_yarn_mscale(factor, float(mscale)) / _yarn_mscale(factor, float(mscale_all_dim)))
    return _yarn_mscale(factor)


def rope_cos_sin_table(
    head_dim: int, theta: float, scaling: dict[str, Any] | None, max_positions: int
) -> torch.Tensor:
    """``[max_positions, rotary_dim]`` fp32 on the CPU: row ``p`` is ``cos(p f)`` then ``sin(p f)``
    (times the attention factor) with the frequencies ``f`` position ``p`` uses. Computed on the CPU
    whatever the default device, so every device serves the same table."""
    with torch.device("cpu"):
        return _table(head_dim, theta, scaling, max_positions)


def _table(head_dim: int, theta: float, scaling: dict[str, Any] | None, max_positions: int) -> torch.Tensor:
    inv_freq = rope_inv_freq(head_dim, theta, scaling)
    rope_type = rope_type_of(scaling)
    dim = 2 * len(inv_freq)
    positions = torch.arange(max_positions, dtype=torch.float32)
    angles = torch.outer(positions, inv_freq)
    if rope_type == "longrope":
        assert scaling is not None
        orig = int(_param(scaling, "original_max_position_embeddings"))
        long_freq = _default_inv_freq(dim, theta) / _factors(scaling, "long_factor", dim)
        angles[orig:] = torch.outer(positions[orig:], long_freq)
    elif rope_type == "dynamic":
        assert scaling is not None
        trained = int(_param(scaling, "max_position_embeddings"))
        if max_positions > trained:
            stretched = _dynamic_inv_freq(dim, theta, scaling, trained, max_positions)
            angles[trained:] = positions[trained:, None] * stretched
    table = torch.cat([angles.cos(), angles.sin()], dim=-1)
    factor = rope_attention_factor(scaling)
    return table * factor if factor != 1.0 else table


def _default_inv_freq(dim: int, theta: float) -> torch.Tensor:
    return 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


def _param(scaling: dict[str, Any], key: str) -> Any:
    if scaling.get(key) is None:
        raise ValueError(f"rope scaling {rope_type_of(scaling)!r} needs {key!r}")
    return scaling[key]


def _factors(scaling: dict[str, Any], key: str, dim: int) -> torch.Tensor:
    """A per-frequency factor list (LongRoPE's short/long factors, GGUF ``rope_freqs``) of ``dim / 2``."""
    values = torch.tensor([float(v) for v in _param(scaling, key)], dtype=torch.float32)
    if values.shape != (dim // 2,):
        raise ValueError(
            f"rope scaling {key!r} has {values.numel()} entries; the rotary dim {dim} needs {dim // 2}"
        )
    return values


def _llama3_inv_freq(inv_freq: torch.Tensor, scaling: dict[str, Any]) -> torch.Tensor:
    """Llama 3.1: divide low frequencies by ``factor``, keep high ones, blend the band between."""
    factor = float(_param(scaling, "factor"))
    low, high = float(_param(scaling, "low_freq_factor")), float(_param(scaling, "high_freq_factor"))
    old_len = float(_param(scaling, "original_max_position_embeddings"))
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
    return torch.where(is_medium, smoothed, scaled)


def _yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def _yarn_inv_freq(dim: int, theta: float, scaling: dict[str, Any]) -> torch.Tensor:
    """YaRN: interpolated (divided by ``factor``) low frequencies, extrapolated high ones, a linear ramp
    between the dims that turn ``beta_slow`` and ``beta_fast`` times over the original context."""
    factor = float(_param(scaling, "factor"))
    orig = float(_param(scaling, "original_max_position_embeddings"))
    beta_fast, beta_slow = float(scaling.get("beta_fast") or 32), float(scaling.get("beta_slow") or 1)

    def correction_dim(rotations: float) -> float:
        return (dim * math.log(orig / (rotations * 2 * math.pi))) / (2 * math.log(theta))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # a one-dim ramp
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    pos_freqs = theta ** (torch.arange(0, dim, 2).float() / dim)
    extrapolation = 1 - ramp
    return (1.0 / (factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation


def _dynamic_inv_freq(
    dim: int, theta: float, scaling: dict[str, Any], trained: int, max_positions: int
) -> torch.Tensor:
    """``[max_positions - trained, dim / 2]``: dynamic NTK's frequencies for a forward ending at each
    position from ``trained`` on (the base stretched for length ``p + 1``, in transformers' fp32 ops)."""
    factor = float(_param(scaling, "factor"))
    lengths = torch.arange(trained + 1, max_positions + 1, dtype=torch.int64)
    base = theta * ((factor * lengths / trained) - (factor - 1)) ** (dim / (dim - 2))
    return 1.0 / (base[:, None] ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim)[None, :])
