"""Cascade attention over a shared cached prefix (decode and extend; torch, torch's flash kernel and
the C++ decode kernel for the private suffixes) equals plain attention."""

from __future__ import annotations

import pytest
import torch

import radixlm.kernels.shared_prefix_attention as shared_prefix
from radixlm.kernels.decode_attention import decode_attention_torch
from radixlm.kernels.shared_prefix_attention import (
    attention_with_lse,
    common_slot_prefix_len,
    decode_attention_shared_prefix_torch,
)
from tests.helpers.built_kernels import decode_kernels, needs_cpu_kernels

kernels = decode_kernels


def _batch_with_shared_prefix(shared: int, suffixes: list[int], hkv: int, group: int, d: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    total = shared + sum(suffixes)
    num_slots = 2 * total + 4
    k = torch.randn(num_slots + 1, hkv, d, generator=gen)
    v = torch.randn(num_slots + 1, hkv, d, generator=gen)
    slots = torch.randperm(num_slots, generator=gen)[:total] + 1  # holes, shuffled
    bs = len(suffixes)
    rows = torch.randperm(bs + 2, generator=gen)[:bs] + 1
    table = torch.zeros(bs + 3, shared + max(suffixes) + 3, dtype=torch.int64)
    start = shared
    for row, n in zip(rows.tolist(), suffixes):
        table[row, :shared] = slots[:shared]
        table[row, shared : shared + n] = slots[start : start + n]
        start += n
    q = torch.randn(bs, hkv * group, d, generator=gen)
    seq_lens = torch.tensor([shared + n for n in suffixes])
    return q, k, v, table, rows, seq_lens


@pytest.mark.parametrize("hkv,group", [(1, 1), (3, 3), (2, 4)])
@pytest.mark.parametrize("shared,suffixes", [(5, [1, 1]), (40, [1, 7, 3, 12]), (100, [2, 30, 1])])
def test_cascade_equals_plain_decode(hkv, group, shared, suffixes):
    q, k, v, table, rows, seq_lens = _batch_with_shared_prefix(shared, suffixes, hkv, group, 16, seed=shared)
    scale = 16**-0.5
    ref = decode_attention_torch(q, k, v, table, rows, seq_lens, scale)
    found = common_slot_prefix_len(table, rows, int(seq_lens.min()) - 1)
    assert found >= shared  # suffix slots differ, so the common prefix is exactly the shared part
    out = decode_attention_shared_prefix_torch(
        q, k, v, table, rows, seq_lens, scale, shared, int(seq_lens.max())
    )
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


@needs_cpu_kernels
@pytest.mark.parametrize("pool_dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("hkv,group,dim", [(1, 1, 16), (3, 3, 64), (2, 4, 40)])
@pytest.mark.parametrize("shared,suffixes", [(32, [1, 1]), (40, [1, 7, 3, 12]), (300, [2, 130, 1, 40, 257])])
def test_cascade_with_in_place_suffixes_equals_plain_decode(hkv, group, dim, shared, suffixes, pool_dtype):
    # the suffixes read in place by the C++ kernel (chunks of 128 keys), merged there with the prefix;
    # an fp16 pool (--kv-cache-dtype float16) against the reference on the same fp16 values
    q, k, v, table, rows, seq_lens = _batch_with_shared_prefix(shared, suffixes, hkv, group, dim, seed=dim)
    k, v = k.to(pool_dtype), v.to(pool_dtype)
    scale = dim**-0.5
    ref = decode_attention_torch(q, k, v, table, rows, seq_lens, scale)
    out = decode_attention_shared_prefix_torch(
        q, k, v, table, rows, seq_lens, scale, shared, int(seq_lens.max()), kernels, seq_lens.tolist()
    )
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("flash", [True, False])
def test_attention_with_lse_matches_softmax_and_logsumexp(flash, monkeypatch):
    if not flash:
        monkeypatch.setattr(shared_prefix, "_flash_cpu_available", lambda: False)
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 3, n, 24, generator=gen) for n in (50, 77, 77))
    k[0, 1, 5] *= 40  # one dominant key: the log-sum-exp must not overflow
    mask = torch.rand(2, 1, 50, 77, generator=gen) < 0.7
    mask[..., 0] = True  # every query sees at least one key
    scores = (q @ k.transpose(-1, -2)) * 0.2
    for m in (None, mask):
        out, lse = attention_with_lse(q, k, v, 0.2, m)
        masked = scores if m is None else scores.masked_fill(~m, float("-inf"))
        torch.testing.assert_close(out, torch.softmax(masked, -1) @ v, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(lse, torch.logsumexp(masked, -1), rtol=1e-5, atol=1e-5)


@needs_cpu_kernels
def test_after_prefix_refuses_a_prefix_of_the_wrong_shape():
    q, k, v, table, rows, seq_lens = _batch_with_shared_prefix(40, [3, 5], 3, 3, 16, seed=1)
    args = (q, k, v, table, rows, seq_lens, seq_lens.tolist(), 0.25, 40)
    with pytest.raises(ValueError, match="prefix_out"):
        kernels.paged_decode_attention_after_prefix(*args, torch.zeros(2, 3, 3, 16), torch.zeros(3, 6))
    with pytest.raises(ValueError, match="prefix_lse"):
        kernels.paged_decode_attention_after_prefix(*args, torch.zeros(3, 6, 16), torch.zeros(6, 3).t())
    with pytest.raises(ValueError, match=r"sequence length must be in \[44"):
        kernels.paged_decode_attention_after_prefix(*args[:-1], 43, torch.zeros(3, 6, 16), torch.zeros(3, 6))


def test_common_prefix_len_stops_at_first_difference():
    table = torch.tensor([[0, 0, 0, 0], [5, 6, 7, 8], [5, 6, 9, 8]])
    assert common_slot_prefix_len(table, torch.tensor([1, 2]), 4) == 2
    assert common_slot_prefix_len(table, torch.tensor([1]), 4) == 0
    assert common_slot_prefix_len(table, torch.tensor([1, 1]), 3) == 3


@pytest.mark.parametrize("in_place", [False, pytest.param(True, marks=needs_cpu_kernels)])
@pytest.mark.parametrize("hkv,group", [(1, 1), (3, 3), (2, 4)])
@pytest.mark.parametrize(
    "shared,cached_tails,exts",
    [
        (40, [0, 0], [5, 1]),  # tails start right after the shared prefix
        (33, [3, 0, 9, 1], [7, 2, 1, 12]),  # some requests have private cached tokens before their extend
        (64, [0, 5, 2], [30, 1, 17]),
    ],
)
def test_cascade_extend_equals_plain_extend(hkv, group, shared, cached_tails, exts, in_place):
    from radixlm.kernels.extend_attention import extend_attention_torch
    from radixlm.kernels.shared_prefix_attention import extend_attention_shared_prefix_torch

    totals = [c + e for c, e in zip(cached_tails, exts)]
    _, k, v, table, rows, _ = _batch_with_shared_prefix(
        shared, totals, hkv, group, 16, seed=shared + len(exts)
    )
    gen = torch.Generator().manual_seed(7)
    q = torch.randn(sum(exts), hkv * group, 16, generator=gen)
    prefix_lens = [shared + c for c in cached_tails]
    scale = 16**-0.5
    ref = extend_attention_torch(q, k, v, table, rows, prefix_lens, exts, scale)
    # in place: each new token's private keys (its cached tail, then the new tokens up to itself)
    # read by the C++ decode kernel as a one-token decode
    out = extend_attention_shared_prefix_torch(
        q, k, v, table, rows, prefix_lens, exts, scale, shared, kernels if in_place else None
    )
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
