"""Row groups in the C++ decode attention (``decode_attention.cpp``): consecutive rows of one request
(a speculative verify step: one row per draft position, each one key longer) read their keys in one
pass, with the bits of the rows read one by one and within fp32 rounding of the torch reference;
across GQA shapes, chunk bounds, page layouts, 16-bit pools, soft-caps and windows."""

from __future__ import annotations

import pytest
import torch

from radixlm.kernels.cpu.row_groups import RowGroups
from radixlm.kernels.decode_attention import decode_attention_torch
from tests.helpers.built_kernels import decode_kernels, needs_cpu_kernels

kernels = decode_kernels
pytestmark = needs_cpu_kernels


def _paged_table(rows: int, ctx: int, page: int, slots: int, g: torch.Generator) -> torch.Tensor:
    """Each row's positions in pages of ``page`` adjacent slots, the pages scattered over the pool."""
    pages = torch.randperm(slots // page, generator=g)[: rows * (ctx // page)].view(rows, -1)
    return (pages[:, :, None] * page + torch.arange(page)).reshape(rows, -1)


def _assert_near_exact(ours: torch.Tensor, exact: torch.Tensor) -> None:
    """Within fp32 rounding of the float64 reference: a float32 torch reference is itself off by up
    to ~2e-6 here, so comparing against it would pass or fail by the machine's summation order."""
    torch.testing.assert_close(ours.double(), exact, atol=3e-6, rtol=1e-6)


def _verify_batch(bases: list[int], sizes: list[int], req_rows: list[int]):
    """Row ``j`` of request ``i`` has ``bases[i] + j + 1`` keys (its draft position ``j``)."""
    rows = [r for r, n in zip(req_rows, sizes) for _ in range(n)]
    lens = [b + j + 1 for b, n in zip(bases, sizes) for j in range(n)]
    return torch.tensor(rows), torch.tensor(lens), lens, RowGroups.of(sizes, rows)


@pytest.mark.parametrize("heads_q,heads_kv,dim", [(9, 3, 64), (4, 4, 128), (8, 2, 40), (6, 1, 12)])
@pytest.mark.parametrize("page", [1, 16])
@pytest.mark.parametrize(
    "bases,sizes",
    [([1866], [5]), ([0], [3]), ([125], [6]), ([127, 300, 40], [2, 1, 8]), ([255, 2, 600, 9], [4, 3, 1, 2])],
)
def test_grouped_rows_have_the_bits_of_single_rows(
    heads_q: int, heads_kv: int, dim: int, page: int, bases: list[int], sizes: list[int]
) -> None:
    g = torch.Generator().manual_seed(len(bases) * 7 + page + dim)
    k = torch.randn(12288, heads_kv, dim, generator=g)
    v = torch.randn(12288, heads_kv, dim, generator=g)
    table = _paged_table(6, 2048, page, 12288, g)
    req_rows = torch.randperm(6, generator=g)[: len(bases)].tolist()
    rows, seq_lens, lens, groups = _verify_batch(bases, sizes, req_rows)
    assert groups is not None
    q = torch.randn(len(lens), heads_q, dim, generator=g)
    scale = dim**-0.5
    grouped = kernels.paged_decode_attention(q, k, v, table, rows, seq_lens, lens, scale, row_groups=groups)
    single = kernels.paged_decode_attention(q, k, v, table, rows, seq_lens, lens, scale)
    assert torch.equal(grouped, single)
    one_thread = kernels.paged_decode_attention(
        q, k, v, table, rows, seq_lens, lens, scale, threads=1, row_groups=groups
    )
    assert torch.equal(grouped, one_thread)
    _assert_near_exact(grouped, decode_attention_torch(q.double(), k, v, table, rows, seq_lens, scale))


@pytest.mark.parametrize("pool_dtype", [torch.float16, torch.bfloat16])
def test_grouped_rows_over_16_bit_pools(pool_dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(3)
    k = torch.randn(4096, 2, 64, generator=g).to(pool_dtype)
    v = torch.randn(4096, 2, 64, generator=g).to(pool_dtype)
    table = _paged_table(4, 1024, 8, 4096, g)
    rows, seq_lens, lens, groups = _verify_batch([500, 130], [5, 4], [2, 0])
    q = torch.randn(len(lens), 8, 64, generator=g)
    grouped = kernels.paged_decode_attention(q, k, v, table, rows, seq_lens, lens, 0.125, row_groups=groups)
    assert torch.equal(grouped, kernels.paged_decode_attention(q, k, v, table, rows, seq_lens, lens, 0.125))
    _assert_near_exact(grouped, decode_attention_torch(q.double(), k, v, table, rows, seq_lens, 0.125))


@pytest.mark.parametrize("window,softcap", [(None, 30.0), (100, None), (4, 50.0)])
def test_grouped_rows_with_softcap_and_window(window: int | None, softcap: float | None) -> None:
    g = torch.Generator().manual_seed(5)
    k = torch.randn(4096, 3, 32, generator=g)
    v = torch.randn(4096, 3, 32, generator=g)
    table = _paged_table(3, 1024, 4, 4096, g)
    rows, seq_lens, lens, groups = _verify_batch([400, 7], [6, 3], [1, 2])
    q = torch.randn(len(lens), 6, 32, generator=g) * 4
    args = (q, k, v, table, rows, seq_lens, lens, 0.2)
    grouped = kernels.paged_decode_attention(*args, window=window, softcap=softcap, row_groups=groups)
    assert torch.equal(grouped, kernels.paged_decode_attention(*args, window=window, softcap=softcap))
    ref = decode_attention_torch(q.double(), k, v, table, rows, seq_lens, 0.2, window=window, softcap=softcap)
    _assert_near_exact(grouped, ref)


def test_row_groups_refuse_bad_groupings() -> None:
    with pytest.raises(ValueError, match="add up"):
        RowGroups.of([2, 2], [0, 0, 1])
    with pytest.raises(ValueError, match="positive"):
        RowGroups.of([0, 3], [0, 0, 0])
    with pytest.raises(ValueError, match="different requests"):
        RowGroups.of([3], [0, 0, 1])
    assert RowGroups.of([1, 1], [0, 1]) is None  # no group shares anything
    k = torch.randn(64, 1, 8)
    table = torch.arange(64).view(2, 32)
    rows, seq_lens, lens, groups = _verify_batch([3], [3], [0])
    with pytest.raises(ValueError, match="row_groups cover 3 rows"):
        kernels.paged_decode_attention(
            torch.randn(2, 1, 8), k, k, table, rows[:2], seq_lens[:2], lens[:2], 1.0, row_groups=groups
        )
