"""The C++ decode-step kernels (``radixlm/kernels/cpu/decode_attention.cpp``, ``rmsnorm.cpp``)
against plain torch references: random pools and slots, ragged lengths across chunk bounds, GQA
groups, head sizes that are not a multiple of 8; results independent of the batch and the threads;
bad arguments refused by name."""

from __future__ import annotations

import pytest
import torch

from radixlm.kernels.decode_attention import decode_attention_torch
from radixlm.kernels.rmsnorm import fused_add_rmsnorm_torch, rmsnorm_torch
from tests.helpers.built_kernels import decode_kernels, needs_cpu_kernels

kernels = decode_kernels
pytestmark = needs_cpu_kernels


def _pool(slots: int, heads_kv: int, dim: int, rows: int, ctx: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    k = torch.randn(slots, heads_kv, dim, generator=g)
    v = torch.randn(slots, heads_kv, dim, generator=g)
    req_to_token = torch.randint(0, slots, (rows, ctx), generator=g)
    return k, v, req_to_token


@pytest.mark.parametrize("heads_q,heads_kv,dim", [(9, 3, 64), (4, 4, 128), (8, 2, 40), (6, 1, 16)])
@pytest.mark.parametrize("lens", [[1], [127, 128, 129], [300, 5, 1000, 77], [256] * 6])
def test_paged_decode_attention_matches_gather_and_sdpa(
    heads_q: int, heads_kv: int, dim: int, lens: list[int]
) -> None:
    k, v, req_to_token = _pool(3000, heads_kv, dim, rows=12, ctx=1024)
    rows = torch.randperm(12)[: len(lens)]
    seq_lens = torch.tensor(lens)
    q = torch.randn(len(lens), heads_q, dim)
    scale = dim**-0.5
    out = kernels.paged_decode_attention(q, k, v, req_to_token, rows, seq_lens, lens, scale)
    ref = decode_attention_torch(q, k, v, req_to_token, rows, seq_lens, scale)
    torch.testing.assert_close(out, ref, atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("pool_dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("heads_q,heads_kv,dim", [(9, 3, 64), (8, 2, 40), (6, 1, 12)])
def test_16_bit_pools_read_as_their_fp32_values(
    pool_dtype: torch.dtype, heads_q: int, heads_kv: int, dim: int
) -> None:
    """A 16-bit pool is widened exactly as it is read: the result has the bits of the fp32 kernel on
    the same values in an fp32 pool (rows whose width is not a multiple of 8 included), and is
    attention over those values (the reference on the widened pool)."""
    k, v, req_to_token = _pool(3000, heads_kv, dim, rows=6, ctx=1024)
    k16, v16 = k.to(pool_dtype), v.to(pool_dtype)
    lens = [1, 129, 1000, 256, 7]
    rows, seq_lens = torch.randperm(6)[: len(lens)], torch.tensor(lens)
    q = torch.randn(len(lens), heads_q, dim)
    out = kernels.paged_decode_attention(q, k16, v16, req_to_token, rows, seq_lens, lens, dim**-0.5)
    widened = kernels.paged_decode_attention(
        q, k16.float(), v16.float(), req_to_token, rows, seq_lens, lens, dim**-0.5
    )
    assert torch.equal(out, widened)
    ref = decode_attention_torch(q, k16, v16, req_to_token, rows, seq_lens, dim**-0.5)
    torch.testing.assert_close(out, ref, atol=2e-6, rtol=1e-5)
    with pytest.raises(ValueError, match="v_pool"):  # K and V of different dtypes are refused
        kernels.paged_decode_attention(q, k16, v, req_to_token, rows, seq_lens, lens, dim**-0.5)


def test_paged_decode_attention_peaked_scores() -> None:
    """Scores hundreds apart (a peaked softmax: most weights underflow) stay exact to fp32 rounding."""
    k, v, req_to_token = _pool(500, 2, 32, rows=2, ctx=400)
    rows, lens = torch.tensor([0, 1]), [400, 333]
    for seed in range(5):
        q = torch.randn(2, 4, 32, generator=torch.Generator().manual_seed(seed)) * 40
        out = kernels.paged_decode_attention(q, k, v, req_to_token, rows, torch.tensor(lens), lens, 1.0)
        # fp32 scores of magnitude ~500 carry ~3e-5 of rounding each (the fp32 torch reference is off
        # from float64 by as much), so the kernel is held to float64 at a bound that allows for it
        ref = decode_attention_torch(
            q.double(), k.double(), v.double(), req_to_token, rows, torch.tensor(lens), 1.0
        )
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out.double(), ref, atol=1e-4, rtol=1e-5)


def test_paged_decode_attention_is_batch_and_thread_invariant() -> None:
    """A request's result has the same bits alone, in any batch, and on any number of threads."""
    k, v, req_to_token = _pool(4000, 3, 64, rows=16, ctx=2048)
    lens = [700, 1, 129, 2048, 64, 300, 900, 5]
    rows = torch.arange(8)
    q = torch.randn(8, 9, 64)
    batch = kernels.paged_decode_attention(q, k, v, req_to_token, rows, torch.tensor(lens), lens, 0.125)
    one_thread = kernels.paged_decode_attention(
        q, k, v, req_to_token, rows, torch.tensor(lens), lens, 0.125, threads=1
    )
    assert torch.equal(batch, one_thread)
    for i in (0, 3, 7):
        alone = kernels.paged_decode_attention(
            q[i : i + 1].contiguous(),
            k,
            v,
            req_to_token,
            rows[i : i + 1],
            torch.tensor(lens[i : i + 1]),
            lens[i : i + 1],
            0.125,
        )
        assert torch.equal(alone[0], batch[i])


def test_many_short_requests_match_and_are_thread_invariant() -> None:
    """A work item spans several short requests, each fetching the next one's first keys ahead: the
    results are attention's, and have the same bits on one thread or two (other items)."""
    k, v, req_to_token = _pool(5000, 3, 64, rows=48, ctx=200)
    lens = [1 + (7 * i) % 90 for i in range(48)]
    rows, seq_lens = torch.randperm(48), torch.tensor(lens)
    q = torch.randn(48, 9, 64)
    two = kernels.paged_decode_attention(q, k, v, req_to_token, rows, seq_lens, lens, 0.125, threads=2)
    one = kernels.paged_decode_attention(q, k, v, req_to_token, rows, seq_lens, lens, 0.125, threads=1)
    assert torch.equal(one, two)
    ref = decode_attention_torch(q, k, v, req_to_token, rows, seq_lens, 0.125)
    torch.testing.assert_close(two, ref, atol=2e-6, rtol=1e-5)


def test_paged_decode_attention_refuses_bad_arguments() -> None:
    k, v, req_to_token = _pool(100, 2, 16, rows=2, ctx=32)
    q, rows, lens = torch.randn(1, 4, 16), torch.tensor([0]), torch.tensor([8])
    with pytest.raises(ValueError, match="seq"):
        kernels.paged_decode_attention(q, k, v, req_to_token, rows, torch.tensor([40]), [40], 0.25)
    with pytest.raises(ValueError, match="q must be"):
        kernels.paged_decode_attention(q.double(), k, v, req_to_token, rows, lens, [8], 0.25)
    with pytest.raises(ValueError, match="do not fit"):
        kernels.paged_decode_attention(torch.randn(1, 3, 16), k, v, req_to_token, rows, lens, [8], 0.25)
    with pytest.raises(ValueError, match="req_to_token"):
        kernels.paged_decode_attention(q, k, v, req_to_token.int(), rows, lens, [8], 0.25)
    with pytest.raises(ValueError, match="threads"):
        kernels.paged_decode_attention(q, k, v, req_to_token, rows, lens, [8], 0.25, threads=0)


def test_a_step_checked_call_still_checks_q_and_the_pools() -> None:
    """A decode step's later layers (``step_checked``) skip the checks of the step's shared tensors,
    not those of their own ``q`` and K/V pools, nor that ``q`` has the step's rows."""
    k, v, req_to_token = _pool(100, 2, 16, rows=2, ctx=32)
    q, rows, lens = torch.randn(1, 4, 16), torch.tensor([0]), torch.tensor([8])
    args = (req_to_token, rows, lens, [8], 0.25)
    first = kernels.paged_decode_attention(q, k, v, *args)
    torch.testing.assert_close(kernels.paged_decode_attention(q, k, v, *args, step_checked=True), first)
    with pytest.raises(ValueError, match="q must be"):
        kernels.paged_decode_attention(q.double(), k, v, *args, step_checked=True)
    with pytest.raises(ValueError, match="v_pool"):
        kernels.paged_decode_attention(q, k, v.half(), *args, step_checked=True)
    with pytest.raises(ValueError, match="rows"):
        kernels.paged_decode_attention(torch.randn(2, 4, 16), k, v, *args, step_checked=True)


@pytest.mark.parametrize("rows,hidden", [(1, 576), (300, 576), (5, 2048), (3, 100)])
def test_rmsnorm_kernels_match_reference(rows: int, hidden: int) -> None:
    x, res, w = torch.randn(rows, hidden) * 3, torch.randn(rows, hidden), torch.randn(hidden)
    torch.testing.assert_close(kernels.rmsnorm(x, w, 1e-5), rmsnorm_torch(x, w, 1e-5), atol=2e-6, rtol=1e-6)
    out, h = kernels.add_rmsnorm(x, res, w, 1e-5)
    ref_out, ref_h = fused_add_rmsnorm_torch(x, res, w, 1e-5)
    assert torch.equal(h, ref_h)
    torch.testing.assert_close(out, ref_out, atol=2e-6, rtol=1e-6)


def test_rmsnorm_kernel_rows_are_batch_invariant() -> None:
    x, w = torch.randn(512, 576), torch.randn(576)
    batch = kernels.rmsnorm(x, w, 1e-6)
    for i in (0, 200, 511):
        assert torch.equal(kernels.rmsnorm(x[i : i + 1].contiguous(), w, 1e-6)[0], batch[i])


def test_per_head_norms_take_the_kernel_and_match_the_reference() -> None:
    """q/k norms over ``[tokens, heads, head_dim]`` views of a fused projection (not contiguous) go
    through the one-pass kernel as rows and give the reference's values in the input's shape."""
    from radixlm.kernels.rmsnorm import rmsnorm

    qkv, w = torch.randn(5, 3 * 4 * 64) * 2, torch.randn(64)
    q = qkv[:, : 4 * 64].view(5, 4, 64)
    assert not q.is_contiguous()
    out = rmsnorm(q, w, 1e-6)
    assert out.shape == (5, 4, 64)
    torch.testing.assert_close(out, rmsnorm_torch(q, w, 1e-6), atol=2e-6, rtol=1e-6)
    rows = kernels.rmsnorm(q.reshape(-1, 64).contiguous(), w, 1e-6)
    assert torch.equal(out.reshape(-1, 64), rows)  # the kernel's bits, not torch's
    with pytest.raises(RuntimeError):
        rmsnorm(q, torch.randn(63), 1e-6)


def test_rmsnorm_kernels_refuse_bad_arguments() -> None:
    with pytest.raises(ValueError, match="weight"):
        kernels.rmsnorm(torch.randn(2, 8), torch.randn(7), 1e-6)
    with pytest.raises(ValueError, match="x must be"):
        kernels.rmsnorm(torch.randn(2, 8).t(), torch.randn(2), 1e-6)
    with pytest.raises(ValueError, match="shape"):
        kernels.add_rmsnorm(torch.randn(2, 8), torch.randn(3, 8), torch.randn(8), 1e-6)
    with pytest.raises(ValueError, match="residual"):
        kernels.add_rmsnorm(torch.randn(2, 8), torch.randn(2, 8).double(), torch.randn(8), 1e-6)
    with pytest.raises(ValueError, match="residual"):
        kernels.add_rmsnorm(torch.randn(8, 8), torch.randn(8, 8).t(), torch.randn(8), 1e-6)


@pytest.mark.parametrize("tokens", [1, 7, 300])
def test_rotary_kernel_has_the_reference_bits(tokens: int) -> None:
    """Strided q/k views of a fused projection, rotated with the reference's exact bits (also on the
    threaded path: 300 tokens)."""
    from radixlm.kernels.rotary import apply_rotary_torch, build_cos_sin_cache

    cache = build_cos_sin_cache(1.0 / (10000 ** (torch.arange(0, 64, 2).float() / 64)), 4096)
    qkv = torch.randn(tokens, (9 + 2 * 3) * 64)
    q, k = qkv[:, : 9 * 64].view(tokens, 9, 64), qkv[:, 9 * 64 : 12 * 64].view(tokens, 3, 64)
    positions = torch.randint(0, 4096, (tokens,))
    out_q, out_k = kernels.rotary(q, k, positions, cache)
    ref_q, ref_k = apply_rotary_torch(q, k, positions, cache)
    assert out_q.is_contiguous() and torch.equal(out_q, ref_q) and torch.equal(out_k, ref_k)


def test_rotary_kernel_refuses_bad_arguments() -> None:
    cache = torch.randn(16, 8)
    q, k = torch.randn(2, 2, 8), torch.randn(2, 1, 8)
    with pytest.raises(ValueError, match="positions"):
        kernels.rotary(q, k, torch.tensor([0, 1], dtype=torch.int32), cache)
    with pytest.raises(ValueError, match="cos_sin_cache"):
        kernels.rotary(q, k, torch.tensor([0, 1]), torch.randn(16, 6))
    with pytest.raises(ValueError, match="unit stride"):
        kernels.rotary(q.transpose(1, 2), k, torch.tensor([0, 1]), cache)
