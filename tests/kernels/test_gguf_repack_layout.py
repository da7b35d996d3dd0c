"""The bytes of Q4_0 repacked into groups of eight rows (``cpu/gguf_interleave.cpp``: the layout)
against a torch statement of that layout."""

from __future__ import annotations

import pytest
import torch

from radixlm.kernels.cpu import gguf_blocks
from tests.helpers.built_kernels import gguf_kernels, needs_cpu_kernels

kernels = gguf_kernels
pytestmark = needs_cpu_kernels
Q4_0 = gguf_blocks.GGML_TYPES["q4_0"]


def reference_groups(blocks: torch.Tensor) -> torch.Tensor:
    """Per group of 8 rows (zero rows pad the last) and block: the 8 fp16 scales, then 4 words of 32
    bytes, word c holding each row's quant bytes 4c..4c+3 in row order."""
    n, nb = blocks.shape[0], blocks.shape[1] // 18
    padded = torch.zeros((n + 7) // 8 * 8, nb, 18, dtype=torch.uint8)
    padded[:n] = blocks.view(n, nb, 18)
    g = padded.view(-1, 8, nb, 18).permute(0, 2, 1, 3)  # [groups, nb, 8, 18]
    scales = g[..., :2].reshape(g.shape[0], nb, 16)
    words = g[..., 2:].reshape(g.shape[0], nb, 8, 4, 4).transpose(2, 3).reshape(g.shape[0], nb, 128)
    return torch.cat([scales, words], dim=-1).reshape(g.shape[0], nb * 144)


@pytest.mark.parametrize("n,k", [(8, 32), (13, 32), (37, 288), (203, 96), (1100, 4096)])
def test_repacked_bytes_match_the_layout(n: int, k: int) -> None:
    """Random bytes (any scale and nibble a file may hold); N ragged and not; one run big enough to
    be split across threads."""
    gen = torch.Generator().manual_seed(n + k)
    blocks = torch.randint(0, 256, (n, k // 32 * 18), dtype=torch.uint8, generator=gen)
    packed = kernels.bind(blocks, Q4_0, k, repack=True).weight
    assert packed.is_contiguous() and torch.equal(packed, reference_groups(blocks))
