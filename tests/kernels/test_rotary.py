"""Triton rotary embedding equals the torch reference, which equals Hugging Face's rotate-half."""

from __future__ import annotations

import pytest
import torch

from radixlm.kernels.rotary import apply_rotary_torch, apply_rotary_triton, build_cos_sin_cache
from radixlm.runtime.layers.rotary import rope_inv_freq

pytestmark = pytest.mark.triton_interpret


def _hf_rotate(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    freqs = torch.outer(positions.float(), inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def test_rotary_matches_reference_and_hf(device):
    head_dim = 32
    inv_freq = rope_inv_freq(head_dim, 10000.0, None)
    cache = build_cos_sin_cache(inv_freq, 64, device)
    positions = torch.tensor([0, 5, 63, 17, 17], device=device)
    qkv = torch.randn(5, 6 * head_dim, device=device)
    q = qkv[:, : 4 * head_dim].view(5, 4, head_dim)  # strided views, as a fused projection gives
    k = qkv[:, 4 * head_dim :].view(5, 2, head_dim)
    ref_q, ref_k = apply_rotary_torch(q, k, positions, cache)
    out_q, out_k = apply_rotary_triton(q, k, positions, cache)
    torch.testing.assert_close(out_q, ref_q, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out_k, ref_k, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(
        ref_q.cpu(), _hf_rotate(q.cpu(), positions.cpu(), inv_freq), atol=1e-5, rtol=1e-5
    )


def test_rotary_of_the_first_dims_of_each_head(device):
    """Partial rotary (Phi-4-mini): ``RotaryEmbedding`` hands the kernels the first 12 of 16 dims of
    each head, strided views, with a 12-wide table."""
    inv_freq = rope_inv_freq(16, 10000.0, {"rope_type": "default", "partial_rotary_factor": 0.75})
    cache = build_cos_sin_cache(inv_freq, 64, device)
    positions = torch.tensor([0, 5, 63, 17, 17], device=device)
    qkv = torch.randn(5, 6 * 16, device=device)
    q, k = qkv[:, : 4 * 16].view(5, 4, 16)[..., :12], qkv[:, 4 * 16 :].view(5, 2, 16)[..., :12]
    ref_q, ref_k = apply_rotary_torch(q, k, positions, cache)
    out_q, out_k = apply_rotary_triton(q, k, positions, cache)
    torch.testing.assert_close(out_q, ref_q, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out_k, ref_k, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(
        ref_q.cpu(), _hf_rotate(q.cpu(), positions.cpu(), inv_freq), atol=1e-5, rtol=1e-5
    )
