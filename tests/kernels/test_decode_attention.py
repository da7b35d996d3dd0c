"""Triton decode attention equals the torch reference on paged, GQA, split-KV layouts."""

from __future__ import annotations

import random

import pytest
import torch

from radixlm.kernels.decode_attention import (
    decode_attention_torch,
    decode_attention_triton,
    default_num_kv_splits,
)
from tests.kernels.paged_fixtures import random_paged_kv

pytestmark = pytest.mark.triton_interpret


@pytest.mark.parametrize("group", [1, 3, 4])
@pytest.mark.parametrize("num_kv_splits", [1, 3, 8])
def test_decode_matches_reference(device, group, num_kv_splits):
    rnd = random.Random(group * 10 + num_kv_splits)
    seq_lens = [rnd.randint(1, 70) for _ in range(3)] + [1]
    num_kv_heads, head_dim = 2, 16
    kv = random_paged_kv(seq_lens, num_kv_heads, head_dim, device, seed=group)
    q = torch.randn(len(seq_lens), num_kv_heads * group, head_dim, device=device)
    lens = torch.tensor(seq_lens, device=device)
    args = (q, kv.k_buffer, kv.v_buffer, kv.req_to_token, kv.req_pool_indices, lens, 0.25)
    ref = decode_attention_torch(*args)
    out = decode_attention_triton(*args, num_kv_splits=num_kv_splits)
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-4)


def test_decode_head_dim_not_power_of_two(device):
    kv = random_paged_kv([9, 33], num_kv_heads=1, head_dim=24, device=device, seed=5)
    q = torch.randn(2, 3, 24, device=device)
    lens = torch.tensor(kv.seq_lens, device=device)
    args = (q, kv.k_buffer, kv.v_buffer, kv.req_to_token, kv.req_pool_indices, lens, 0.2)
    torch.testing.assert_close(
        decode_attention_triton(*args, num_kv_splits=2), decode_attention_torch(*args), atol=2e-5, rtol=1e-4
    )


def test_default_splits_bounded():
    cpu = torch.device("cpu")
    assert default_num_kv_splits(1, 1, cpu) >= 1
    assert default_num_kv_splits(1, 1, cpu, max_seq_len=10) == 1
    assert default_num_kv_splits(4096, 8, cpu) == 1
