"""Block-by-block CPU attention (``kernels/blocked_attention.py``) against float64 attention written out
in full, for the masks the extend path builds: causal after a prefix, windows, soft-caps, images'
two-way spans, grouped heads."""

from __future__ import annotations

import pytest
import torch

from radixlm.kernels.blocked_attention import QUERY_BLOCK, attend_blocked, blocked_attention_applies
from radixlm.kernels.windowed_attention import attend, visible


def _exact(q, k, v, mask, scale, softcap):
    group = q.shape[-3] // k.shape[-3]
    k, v = (t.double().repeat_interleave(group, dim=-3) for t in (k, v))
    scores = q.double() @ k.transpose(-1, -2) * scale
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


@pytest.mark.parametrize(
    "queries,prefix,heads,window,softcap,spans",
    [
        (300, 0, (9, 3), None, None, None),  # a fresh prompt, grouped heads
        (200, 517, (4, 4), None, None, None),  # a chunk after a cached prefix
        (257, 40, (8, 2), 50, None, None),  # a sliding window: blocks skip the keys before it
        (130, 0, (6, 3), None, 30.0, None),  # Gemma 2's soft-cap
        (180, 10, (4, 2), 64, 50.0, [(20, 90), (150, 175)]),  # Gemma 3: windowed, capped, images
    ],
)
def test_blocked_attention_equals_exact_attention(queries, prefix, heads, window, softcap, spans) -> None:
    g = torch.Generator().manual_seed(queries)
    hq, hkv = heads
    q = torch.randn(hq, queries, 64, generator=g) * 2
    k = torch.randn(hkv, prefix + queries, 64, generator=g)
    v = torch.randn(hkv, prefix + queries, 64, generator=g)
    mask = visible(torch.arange(prefix, prefix + queries), torch.arange(prefix + queries), window, spans)
    assert blocked_attention_applies(q, mask)
    ours = attend(q, k, v, mask, 0.125, softcap)
    torch.testing.assert_close(ours.double(), _exact(q, k, v, mask, 0.125, softcap), atol=2e-6, rtol=1e-5)


def test_batched_leading_dims_and_no_mask() -> None:
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 6, 3 * QUERY_BLOCK + 5, 32, generator=g)
    k = torch.randn(2, 2, 100, 32, generator=g)
    v = torch.randn(2, 2, 100, 32, generator=g)
    exact = _exact(q, k, v, None, 0.2, None)
    torch.testing.assert_close(attend_blocked(q, k, v, None, 0.2).double(), exact, atol=2e-6, rtol=1e-5)
    mask = torch.rand(2, 1, q.shape[-2], 100, generator=g) < 0.7
    mask[..., 0] = True  # every query sees a key
    exact = _exact(q, k, v, mask, 0.2, None)
    torch.testing.assert_close(attend_blocked(q, k, v, mask, 0.2).double(), exact, atol=2e-6, rtol=1e-5)


def test_blocking_is_left_to_sdpa_where_it_does_not_apply() -> None:
    q = torch.zeros(4, 2 * QUERY_BLOCK, 16)
    assert not blocked_attention_applies(q, None)  # too few queries to block
    many = torch.zeros(4, 2 * QUERY_BLOCK + 1, 16)
    assert blocked_attention_applies(many, None)
    assert not blocked_attention_applies(many, torch.ones(4, many.shape[-2], 8, dtype=torch.bool))  # per head
