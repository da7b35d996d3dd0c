"""Sliding windows and logit soft-caps in every attention path (the torch extend and decode
references, the Triton kernels, the C++ in-place decode kernel) equal a dense reference that masks
and caps a full score matrix position by position."""

from __future__ import annotations

import pytest
import torch

from radixlm.kernels.decode_attention import decode_attention_torch, decode_attention_triton
from radixlm.kernels.extend_attention import (
    build_extend_metadata,
    extend_attention_torch,
    extend_attention_triton,
)
from radixlm.runtime.attention.torch_decode import decode_attention_planned, plan_decode
from tests.helpers.built_kernels import decode_kernels, needs_cpu_kernels
from tests.kernels.paged_fixtures import PagedKV, random_paged_kv

pytestmark = pytest.mark.triton_interpret

CASES = [(None, None), (5, None), (None, 2.0), (7, 1.5), (1, None)]  # (window, softcap)


def dense(q: torch.Tensor, kv: PagedKV, row: int, q_pos: int, scale: float, window, softcap) -> torch.Tensor:
    """One query ``[Hq, D]`` at ``q_pos`` over its request's keys, written out the slow way."""
    slots = kv.req_to_token[row, : q_pos + 1]
    group = q.shape[0] // kv.k_buffer.shape[1]
    k = kv.k_buffer[slots].repeat_interleave(group, dim=1)  # [L, Hq, D]
    v = kv.v_buffer[slots].repeat_interleave(group, dim=1)
    scores = torch.einsum("hd,lhd->hl", q, k) * scale
    if softcap is not None:
        scores = softcap * torch.tanh(scores / softcap)
    pos = torch.arange(q_pos + 1)
    if window is not None:
        scores[:, pos <= q_pos - window] = float("-inf")
    return torch.einsum("hl,lhd->hd", torch.softmax(scores, -1), v)


def _decode_case(device, window, softcap):
    lens = [1, 6, 19, 40]
    kv = random_paged_kv(lens, num_kv_heads=2, head_dim=16, device=device, seed=3)
    q = torch.randn(len(lens), 6, 16, device=device, generator=None)
    rows = kv.req_pool_indices.tolist()
    ref = torch.stack(
        [dense(q[i].cpu(), _cpu(kv), rows[i], n - 1, 0.3, window, softcap) for i, n in enumerate(lens)]
    )
    return kv, q, torch.tensor(lens, device=device), ref


def _cpu(kv: PagedKV) -> PagedKV:
    return PagedKV(*(t.cpu() if isinstance(t, torch.Tensor) else t for t in kv))


@pytest.mark.parametrize("window, softcap", CASES)
def test_decode_torch_and_triton(device, window, softcap):
    torch.manual_seed(0)
    kv, q, lens, ref = _decode_case(device, window, softcap)
    args = (q, kv.k_buffer, kv.v_buffer, kv.req_to_token, kv.req_pool_indices, lens, 0.3)
    out = decode_attention_torch(*args, window=window, softcap=softcap)
    torch.testing.assert_close(out.cpu(), ref, atol=2e-5, rtol=1e-4)
    for splits in (1, 3):
        tri = decode_attention_triton(*args, num_kv_splits=splits, window=window, softcap=softcap)
        torch.testing.assert_close(tri.cpu(), ref, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("window, softcap", CASES)
def test_extend_torch_and_triton(device, window, softcap):
    torch.manual_seed(1)
    prefix_lens, ext_lens = [0, 13, 30], [21, 9, 1]
    lens = [p + e for p, e in zip(prefix_lens, ext_lens)]
    kv = random_paged_kv(lens, num_kv_heads=2, head_dim=16, device=device, seed=4)
    q = torch.randn(sum(ext_lens), 4, 16, device=device)
    rows = kv.req_pool_indices.tolist()
    ref, t = [], 0
    for row, p, e in zip(rows, prefix_lens, ext_lens):
        ref += [dense(q[t + j].cpu(), _cpu(kv), row, p + j, 0.3, window, softcap) for j in range(e)]
        t += e
    expected = torch.stack(ref)
    args = (q, kv.k_buffer, kv.v_buffer, kv.req_to_token, kv.req_pool_indices)
    out = extend_attention_torch(*args, prefix_lens, ext_lens, 0.3, window=window, softcap=softcap)
    torch.testing.assert_close(out.cpu(), expected, atol=2e-5, rtol=1e-4)
    t_lens = torch.tensor([prefix_lens, ext_lens], device=device)
    meta = build_extend_metadata(t_lens[0], t_lens[1], max(ext_lens))
    tri = extend_attention_triton(*args, meta, 0.3, window=window, softcap=softcap)
    torch.testing.assert_close(tri.cpu(), expected, atol=2e-5, rtol=1e-4)


def test_bad_window_or_softcap_is_refused(device):
    kv = random_paged_kv([4], num_kv_heads=1, head_dim=8, device=device)
    args = (
        torch.randn(1, 1, 8, device=device),
        kv.k_buffer,
        kv.v_buffer,
        kv.req_to_token,
        kv.req_pool_indices,
    )
    with pytest.raises(ValueError, match="sliding window"):
        decode_attention_torch(*args, torch.tensor([4], device=device), 1.0, window=0)
    with pytest.raises(ValueError, match="softcap"):
        extend_attention_torch(*args, [0], [1], 1.0, softcap=-1.0)


@needs_cpu_kernels
@pytest.mark.parametrize(
    "window, softcap", [(5, None), (130, None), (None, 2.0), (7, 1.5), (1, None), (4000, 3.0)]
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cpu_in_place_decode_kernel(window, softcap, dtype):
    """The C++ kernel's per-request first key (windows across its 128-key chunks) and its cap equal
    the torch reference on the same (possibly bf16) pool, and stay batch- and thread-invariant."""
    g = torch.Generator().manual_seed(5)
    lens = [300, 5, 129, 1, 257]
    k = torch.randn(2000, 2, 40, generator=g).to(dtype)
    v = torch.randn(2000, 2, 40, generator=g).to(dtype)
    req_to_token = torch.randperm(2000, generator=g)[: 6 * 300].view(6, 300).contiguous()
    rows, seq_lens = torch.tensor([4, 0, 2, 5, 1]), torch.tensor(lens)
    q = torch.randn(len(lens), 6, 40, generator=g)
    args = (q, k, v, req_to_token, rows, seq_lens)
    out = decode_kernels.paged_decode_attention(*args, lens, 0.2, window=window, softcap=softcap)
    ref = decode_attention_torch(*args, 0.2, window=window, softcap=softcap)
    torch.testing.assert_close(out, ref, atol=2e-6, rtol=1e-5)
    one_thread = decode_kernels.paged_decode_attention(
        *args, lens, 0.2, threads=1, window=window, softcap=softcap
    )
    assert torch.equal(out, one_thread)
    alone = decode_kernels.paged_decode_attention(
        q[:1].contiguous(),
        k,
        v,
        req_to_token,
        rows[:1],
        seq_lens[:1],
        lens[:1],
        0.2,
        window=window,
        softcap=softcap,
    )
    assert torch.equal(alone[0], out[0])
    with pytest.raises(ValueError, match="sliding window"):
        decode_kernels.paged_decode_attention(*args, lens, 0.2, window=0)


@pytest.mark.parametrize("window, softcap", CASES)
def test_planned_decode_gather_path(window, softcap):
    """The torch backend's gather path (no C++ kernel: ``in_place=False``), ragged lengths."""
    kv, q, lens, ref = _decode_case(torch.device("cpu"), window, softcap)
    plan = plan_decode(kv.req_to_token, kv.req_pool_indices, lens, lens.tolist(), in_place=False)
    out = decode_attention_planned(q, kv.k_buffer, kv.v_buffer, plan, 0.3, window, softcap)
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-4)
