"""``lazy_zeros``: what ``torch.zeros`` gives, without touching its pages until they are written."""

from __future__ import annotations

import resource

import pytest
import torch

from radixlm.runtime.memory.kv_pool import KVPool
from radixlm.runtime.memory.lazy_zeros import lazy_zeros


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.int8, torch.float64])
def test_lazy_zeros_is_torch_zeros(dtype) -> None:
    shape = (7, 3, 5)
    t = lazy_zeros(shape, dtype)
    assert torch.equal(t, torch.zeros(shape, dtype=dtype))
    assert t.is_contiguous() and t.data_ptr() % 64 == 0
    t[2, 1] = 3
    assert t.sum().item() == 15  # writable, and the write lands in this tensor only


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def test_a_large_kv_pool_costs_no_resident_memory_until_written() -> None:
    before = _rss_bytes()
    pool = KVPool(
        num_slots=1 << 16, num_layers=4, num_kv_heads=8, head_dim=64, dtype=torch.bfloat16
    )  # 512 MiB
    assert _rss_bytes() - before < 64 << 20
    k, v = pool.get_kv_buffer(3)
    assert not k.any() and not v.any()  # reads zeros, as torch.zeros would
    pool.store(
        3,
        torch.tensor([5, 9]),
        torch.ones(2, 8, 64, dtype=torch.bfloat16),
        torch.full((2, 8, 64), 2.0, dtype=torch.bfloat16),
    )
    assert k[5].eq(1).all() and v[9].eq(2).all() and k.sum().item() == 2 * 8 * 64
