"""Triton bitmask application equals the torch reference (bit j%32 of word j//32, optional rows)."""

from __future__ import annotations

import pytest
import torch

from radixlm.kernels.token_bitmask import (
    apply_token_bitmask_torch,
    apply_token_bitmask_triton,
    unpack_bitmask,
)

pytestmark = pytest.mark.triton_interpret


def _random_bitmask(rows: int, vocab: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    words = -(-vocab // 32) + 1  # one spare word, as a padded mask buffer has
    return torch.randint(-(2**31), 2**31 - 1, (rows, words), generator=gen, dtype=torch.int64).to(torch.int32)


@pytest.mark.parametrize("vocab", [32, 77, 300])
def test_all_rows(device, vocab):
    logits = torch.randn(3, vocab, device=device)
    mask = _random_bitmask(3, vocab, vocab).to(device)
    ref = logits.clone()
    apply_token_bitmask_torch(ref, mask)
    apply_token_bitmask_triton(logits, mask)
    assert torch.equal(logits, ref)


def test_selected_rows_and_sign_bit(device):
    vocab = 70
    logits = torch.randn(5, vocab, device=device)
    mask = torch.zeros(2, 3, dtype=torch.int32)
    mask[0, 0] = -(2**31)  # only token 31 allowed (bit 31, the sign bit)
    mask[1, 2] = 0b101  # tokens 64 and 66 allowed
    mask = mask.to(device)
    rows = torch.tensor([3, 1], device=device)
    ref = logits.clone()
    apply_token_bitmask_torch(ref, mask, rows)
    apply_token_bitmask_triton(logits, mask, rows)
    assert torch.equal(logits, ref)
    assert torch.isfinite(logits[3]).nonzero().flatten().tolist() == [31]
    assert torch.isfinite(logits[1]).nonzero().flatten().tolist() == [64, 66]
    assert torch.isfinite(logits[[0, 2, 4]]).all()


def test_unpack_layout():
    mask = torch.tensor([[0b10, 1]], dtype=torch.int32)
    allowed = unpack_bitmask(mask, 40)
    assert allowed.nonzero()[:, 1].tolist() == [1, 32]
