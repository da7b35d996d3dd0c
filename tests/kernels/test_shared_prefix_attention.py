"""Cascade decode attention over a shared cached prefix equals plain decode attention."""
from __future__ import annotations

import pytest
import torch

from radixlm.kernels.decode_attention import decode_attention_torch
from radixlm.kernels.shared_prefix_attention import (
    common_slot_prefix_len,
    decode_attention_shared_prefix_torch,
)


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
    scale = 16 ** -0.5
    ref = decode_attention_torch(q, k, v, table, rows, seq_lens, scale)
    found = common_slot_prefix_len(table, rows, int(seq_lens.min()) - 1)
    assert found >= shared  # suffix slots differ, so the common prefix is exactly the shared part
    out = decode_attention_shared_prefix_torch(q, k, v, table, rows, seq_lens, scale, shared,
                                               int(seq_lens.max()))
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_common_prefix_len_stops_at_first_difference():
    table = torch.tensor([[0, 0, 0, 0], [5, 6, 7, 8], [5, 6, 9, 8]])
    assert common_slot_prefix_len(table, torch.tensor([1, 2]), 4) == 2
    assert common_slot_prefix_len(table, torch.tensor([1]), 4) == 0
    assert common_slot_prefix_len(table, torch.tensor([1, 1]), 3) == 3


@pytest.mark.parametrize("hkv,group", [(1, 1), (3, 3), (2, 4)])
@pytest.mark.parametrize("shared,cached_tails,exts", [
    (40, [0, 0], [5, 1]),             # tails start right after the shared prefix
    (33, [3, 0, 9, 1], [7, 2, 1, 12]),  # some requests have private cached tokens before their extend
    (64, [0, 5, 2], [30, 1, 17]),
])
def test_cascade_extend_equals_plain_extend(hkv, group, shared, cached_tails, exts):
    from radixlm.kernels.extend_attention import extend_attention_torch
    from radixlm.kernels.shared_prefix_attention import extend_attention_shared_prefix_torch

    totals = [c + e for c, e in zip(cached_tails, exts)]
    _, k, v, table, rows, _ = _batch_with_shared_prefix(shared, totals, hkv, group, 16,
                                                        seed=shared + len(exts))
    gen = torch.Generator().manual_seed(7)
    q = torch.randn(sum(exts), hkv * group, 16, generator=gen)
    prefix_lens = [shared + c for c in cached_tails]
    scale = 16 ** -0.5
    ref = extend_attention_torch(q, k, v, table, rows, prefix_lens, exts, scale)
    out = extend_attention_shared_prefix_torch(q, k, v, table, rows, prefix_lens, exts, scale, shared)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
