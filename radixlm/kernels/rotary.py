"""Rotary position embedding in the "rotate half" layout of Hugging Face Llama.

``cos_sin_cache``: ``[max_positions, head_dim]`` fp32, cosines in the first half of each row and
sines in the second. The rotation is computed in fp32 and rounded once to the input dtype.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from radixlm.kernels import _launch
from radixlm.kernels._launch import next_power_of_2
from radixlm.kernels.cpu.build import decode_kernels_if_ready

# a step's (cos, sin) factors for ``rotate_by_factors``: ``[T, 1, 2, D/2]`` each
StepFactors = tuple[torch.Tensor, torch.Tensor]


def build_cos_sin_cache(
    inv_freq: torch.Tensor, max_positions: int, device: str | torch.device = "cpu"
) -> torch.Tensor:
    """``[max_positions, 2 * len(inv_freq)]``: ``cos(p * f)`` then ``sin(p * f)`` per position.

    ``inv_freq`` carries any rope scaling. Computed on the CPU (whatever the default device), then
    moved to ``device``.
    """
    pos = torch.arange(max_positions, dtype=torch.float32, device="cpu")
    freqs = torch.outer(pos, inv_freq.float().cpu())
    return torch.cat([freqs.cos(), freqs.sin()], dim=-1).to(device)


def _rotate_torch(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    xf = x.float()
    x1, x2 = xf[..., :half], xf[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)


def apply_rotary_torch(
    q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, cos_sin_cache: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact reference. ``q``: ``[T, Hq, D]``, ``k``: ``[T, Hkv, D]``, ``positions``: ``[T]``.

    Returns new rotated ``(q, k)``.
    """
    half = q.shape[-1] // 2
    cs = cos_sin_cache[positions].float()[:, None, :]  # [T, 1, D]
    cos, sin = cs[..., :half], cs[..., half:]
    return _rotate_torch(q, cos, sin), _rotate_torch(k, cos, sin)


def _rotate_triton(x: torch.Tensor, positions: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
    from radixlm.kernels._triton import rotary as kernels

    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if x.shape[0] and x.shape[1]:
        half = x.shape[-1] // 2
        kernels.rotary_kernel[(x.shape[0], x.shape[1])](
            x,
            out,
            positions,
            cache,
            x.stride(0),
            x.stride(1),
            out.stride(0),
            out.stride(1),
            cache.stride(0),
            HALF=half,
            BLOCK=next_power_of_2(half),
        )
    return out


def apply_rotary_triton(
    q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, cos_sin_cache: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton version of :func:`apply_rotary_torch`: one program per ``(token, head)``.

    ``q``/``k`` may be strided views (e.g. slices of a fused qkv projection) with a unit stride
    along ``head_dim``.
    """
    assert q.stride(-1) == 1 and k.stride(-1) == 1, "head_dim must be contiguous"
    cache = cos_sin_cache.contiguous()
    return _rotate_triton(q, positions, cache), _rotate_triton(k, positions, cache)


def rotate_by_factors(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``[x1 cos - x2 sin, x2 cos + x1 sin]`` in fp32, rounded once to ``x``'s dtype (as
    :func:`apply_rotary_torch`): ``x * cos + swap_halves(x) * sin`` with ``cos`` the cosines twice and
    ``sin`` = ``[-sin, sin]``, both ``[T, 1, 2, D/2]``."""
    t, heads, dim = x.shape
    xf = x.float().reshape(t, heads, 2, dim // 2)
    out = xf * cos
    out += xf.flip(2).mul_(sin)
    return out.view(t, heads, dim).to(x.dtype)


def apply_rotary(
    q: torch.Tensor,
    k: torch.Tensor,
    positions: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    step_factors: Callable[[], StepFactors] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The dispatch point: Triton on CUDA; fp32 q and k on the CPU take one C++ call once built
    (``cpu/rotary.cpp``, the reference's bits); elsewhere the torch rotation, by ``step_factors()``
    when given (a step's cos/sin rows gathered once and shared by every layer) or
    :func:`apply_rotary_torch`."""
    if _launch.use_triton(q):
        return apply_rotary_triton(q, k, positions, cos_sin_cache)
    fp32 = q.dtype == k.dtype == torch.float32 and positions.dtype == torch.int64
    kernels = decode_kernels_if_ready() if fp32 and q.is_cpu else None
    if kernels is not None and q.stride(2) == 1 and k.stride(2) == 1:
        return kernels.rotary(q, k, positions.contiguous(), cos_sin_cache)
    if step_factors is None:
        return apply_rotary_torch(q, k, positions, cos_sin_cache)
    cos, sin = step_factors()
    return rotate_by_factors(q, cos, sin), rotate_by_factors(k, cos, sin)
