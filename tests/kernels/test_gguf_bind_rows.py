"""``GGUFKernels.bind_rows`` and ``GGUFProduct`` over row pieces (an expert's gate rows, then its up
rows): the product of the rows stacked, bit for bit, without a joined copy of the blocks where the
pieces repack; the file pages behind the pieces released exactly when the product reads a copy."""

from __future__ import annotations

import pytest
import torch

from radixlm.kernels.cpu import gguf_blocks
from radixlm.kernels.gguf_linear import GGUFProduct
from tests.helpers.built_kernels import gguf_kernels, needs_cpu_kernels

kernels = gguf_kernels
pytestmark = needs_cpu_kernels


def _pieces(rows: list[int], fmt: str, k: int = 64) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(sum(rows))
    return [gguf_blocks.quantize(torch.randn(n, k, generator=gen), fmt) for n in rows]


@pytest.mark.parametrize("fmt", ["q4_0", "q4_1", "q8_0", "q4_k", "q6_k"])
@pytest.mark.parametrize("rows", [[16, 24], [8, 8, 8], [13, 16], [32]])
def test_pieces_give_the_stacked_rows_product(fmt: str, rows: list[int]) -> None:
    k = 256 if fmt.endswith("_k") else 64
    pieces = _pieces(rows, fmt, k)
    x = torch.randn(5, k)
    ggml_type = gguf_blocks.GGML_TYPES[fmt]
    want = kernels.bind(torch.cat(pieces), ggml_type, k)(x)
    bound = kernels.bind_rows(pieces, ggml_type, k)
    assert torch.equal(bound(x), want)
    single = kernels.bind(pieces[0], ggml_type, k)
    if single.repacked and all(n % 8 == 0 for n in rows):
        assert bound.repacked  # groups joined: no copy of the pieces' blocks was bound


@pytest.mark.parametrize("fmt", ["q4_0", "q8_0"])
def test_release_follows_what_the_product_reads(fmt: str) -> None:
    """One piece the kernel reads in place keeps its pages; a repacked or joined one lets them go."""
    k, calls = 64, []
    ggml_type = gguf_blocks.GGML_TYPES[fmt]
    one = GGUFProduct(_pieces([16], fmt)[0], fmt, k, release=lambda: calls.append("one"))
    two = GGUFProduct(_pieces([16, 8], fmt), fmt, k, release=lambda: calls.append("two"))
    repacks = kernels.bind(one.blocks, ggml_type, k).repacked
    assert one.bound_to_copy == repacks and two.bound_to_copy
    assert calls == (["one", "two"] if repacks else ["two"])
    x = torch.randn(3, k)
    assert torch.equal(two(x), kernels.bind(two.blocks, ggml_type, k)(x))
    assert two.blocks.shape[0] == 24
