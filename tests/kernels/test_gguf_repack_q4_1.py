"""Q4_1 repacked into groups of eight interleaved rows (``cpu/gguf_interleave_q4_1.cpp``): the bytes
against a torch statement of the layout, and the product against the dequantized fp32 reference
(test_gguf_linear.py's bound: only the activations' rounding to int8 blocks of 32)."""

from __future__ import annotations

import pytest
import torch

from radixlm.kernels.cpu import gguf_blocks
from tests.helpers.built_kernels import gguf_kernels, needs_cpu_kernels
from tests.kernels.test_gguf_repack_kquants import _check

kernels = gguf_kernels
pytestmark = needs_cpu_kernels
Q4_1 = gguf_blocks.GGML_TYPES["q4_1"]


def reference_groups(blocks: torch.Tensor) -> torch.Tensor:
    """Per group of 8 rows (zero rows pad the last) and block: the 8 fp16 d, the 8 fp16 m, then 4
    words of 32 bytes, word c holding each row's quant bytes 4c..4c+3 in row order."""
    n, nb = blocks.shape[0], blocks.shape[1] // 20
    padded = torch.zeros((n + 7) // 8 * 8, nb, 20, dtype=torch.uint8)
    padded[:n] = blocks.view(n, nb, 20)
    g = padded.view(-1, 8, nb, 20).permute(0, 2, 1, 3)  # [groups, nb, 8, 20]
    d, m = g[..., 0:2].reshape(g.shape[0], nb, 16), g[..., 2:4].reshape(g.shape[0], nb, 16)
    words = g[..., 4:].reshape(g.shape[0], nb, 8, 4, 4).transpose(2, 3).reshape(g.shape[0], nb, 128)
    return torch.cat([d, m, words], dim=-1).reshape(g.shape[0], nb * 160)


def _random_blocks(n: int, k: int, seed: int) -> torch.Tensor:
    """Any nibbles; fp16 d and m in +-0.05."""
    gen = torch.Generator().manual_seed(seed)
    blocks = torch.randint(0, 256, (n, gguf_blocks.row_bytes("q4_1", k)), dtype=torch.uint8, generator=gen)
    view = blocks.view(n, k // 32, 20)
    view[..., :4] = ((torch.rand(n, k // 32, 2, generator=gen) - 0.5) * 0.1).half().view(torch.uint8)
    return blocks


@pytest.mark.parametrize("n,k", [(8, 32), (13, 32), (37, 288), (203, 96)])
def test_repacked_bytes_match_the_layout(n: int, k: int) -> None:
    blocks = _random_blocks(n, k, seed=n + k)
    packed = kernels.bind(blocks, Q4_1, k, repack=True).weight
    assert packed.is_contiguous() and torch.equal(packed, reference_groups(blocks))


@pytest.mark.parametrize("n,k", [(8, 32), (13, 32), (37, 288), (64, 1024), (203, 96)])
def test_repacked_matches_dequantized_reference(n: int, k: int) -> None:
    gen = torch.Generator().manual_seed(n * k)
    blocks = gguf_blocks.quantize(torch.randn(n, k, generator=gen) * 0.1, "q4_1")
    product = kernels.bind(blocks, Q4_1, k, repack=True)
    assert product.repacked and product.weight.shape == ((n + 7) // 8, k // 32 * 160)
    for m in (1, 2, 3, 5, 8, 17, 33):
        x = torch.randn(m, k, generator=gen) * torch.rand(m, 1, generator=gen) * 4
        _check(product(x), x, blocks, "q4_1")


def test_repacked_on_random_block_bytes_and_extreme_activations() -> None:
    """Any nibbles, and activations that round to +-127 everywhere (the int16 sums' worst case)."""
    gen = torch.Generator().manual_seed(11)
    blocks = _random_blocks(19, 256, seed=7)
    blocks.view(19, 8, 20)[0, :, 4:] = 0xFF  # all nibbles 15
    product = kernels.bind(blocks, Q4_1, 256, repack=True)
    x = torch.randn(6, 256, generator=gen)
    x[0] = 1.0
    x[1] = -1.0
    _check(product(x), x, blocks, "q4_1")
