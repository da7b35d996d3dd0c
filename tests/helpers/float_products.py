"""Random fp32 matrix products and their float64 reference, shared by the tests of our CPU products."""

from __future__ import annotations

import torch


def random_product(
    rows: int, n: int, k: int, bias: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``x`` ``[rows, k]``, ``w`` ``[n, k]`` and optionally ``b`` ``[n]`` of unit normals, seeded by
    the shape (the same case on every run)."""
    g = torch.Generator().manual_seed(rows * 7919 + n * 31 + k)
    x = torch.randn(rows, k, generator=g)
    w = torch.randn(n, k, generator=g)
    return x, w, (torch.randn(n, generator=g) if bias else None)


def assert_matches_float64(
    out: torch.Tensor, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None
) -> None:
    """``out`` is fp32 ``x @ w^T + b`` up to fp32 summation: sums of k products of unit normals, so
    the error grows like sqrt(k) ulps of the magnitude."""
    reference = x.double() @ w.double().T + (0 if b is None else b.double())
    assert out.shape == (x.shape[0], w.shape[0]) and out.dtype == torch.float32
    torch.testing.assert_close(out, reference.float(), atol=2e-6 * x.shape[1] ** 0.5 * 4, rtol=1e-5)
