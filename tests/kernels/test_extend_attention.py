"""Triton extend attention equals the torch reference: cached prefixes, causal new tokens, GQA."""

from __future__ import annotations

import random

import pytest
import torch

from radixlm.kernels.extend_attention import (
    build_extend_metadata,
    extend_attention_torch,
    extend_attention_triton,
)
from tests.kernels.paged_fixtures import random_paged_kv

pytestmark = pytest.mark.triton_interpret


def _run(
    device, prefix_lens: list[int], ext_lens: list[int], group: int, head_dim: int = 16, seed: int = 0
) -> None:
    num_kv_heads = 2
    seq_lens = [p + e for p, e in zip(prefix_lens, ext_lens)]
    kv = random_paged_kv(seq_lens, num_kv_heads, head_dim, device, seed=seed)
    q = torch.randn(sum(ext_lens), num_kv_heads * group, head_dim, device=device)
    ref = extend_attention_torch(
        q, kv.k_buffer, kv.v_buffer, kv.req_to_token, kv.req_pool_indices, prefix_lens, ext_lens, 0.3
    )
    lens = torch.tensor([prefix_lens, ext_lens], device=device)
    meta = build_extend_metadata(lens[0], lens[1], max(ext_lens))
    out = extend_attention_triton(
        q, kv.k_buffer, kv.v_buffer, kv.req_to_token, kv.req_pool_indices, meta, 0.3
    )
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("group", [1, 3, 4])
def test_extend_random_prefixes(device, group):
    rnd = random.Random(group)
    prefix_lens = [0, rnd.randint(1, 40), rnd.randint(1, 20)]
    ext_lens = [rnd.randint(1, 20), rnd.randint(1, 35), 1]
    _run(device, prefix_lens, ext_lens, group, seed=group)


def test_extend_without_prefix_single_request(device):
    _run(device, [0], [23], group=2, seed=7)


def test_extend_head_dim_not_power_of_two(device):
    _run(device, [5, 0], [3, 18], group=1, head_dim=24, seed=3)
