"""The C++ GGUF block kernel and FBGEMM int8 linear against plain torch references.

Reference: the blocks dequantized in torch (``gguf_blocks.dequantize``), then ``F.linear`` in float64.
The kernels' only approximation is the activations: each block of 32 is rounded to int8 with scale
``d = max|x_block| / 127``, so every activation is off by at most ``d / 2`` and an output by at most
``sum_j |w_j| * d_block(j) / 2`` (plus fp32 accumulation rounding). The tests assert that bound per
output element, computed from the data, instead of a guessed tolerance.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from radixlm.kernels.cpu import gguf_blocks
from radixlm.runtime.layers.quantized_linear import GGUFLinear, Int8Linear
from tests.helpers.built_kernels import gguf_kernels, needs_cpu_kernels

kernels = gguf_kernels
pytestmark = needs_cpu_kernels
# blocks of 32; the K-quants' super-blocks of 256 are tested in test_gguf_kquants.py
FORMATS = [f for f in gguf_blocks.GGML_TYPES if gguf_blocks.BLOCK_ELEMENTS[f] == gguf_blocks.BLOCK]


def _activation_error_bound(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Per-output bound of the error from rounding x to int8 blocks of 32 (see module docstring)."""
    m, k = x.shape
    half_step = x.abs().reshape(m, k // 32, 32).amax(-1) / 127 / 2  # [m, blocks]
    per_elem = half_step.repeat_interleave(32, dim=1).double()
    return per_elem @ w.abs().double().T


def _check(x: torch.Tensor, blocks: torch.Tensor, fmt: str) -> None:
    w = gguf_blocks.dequantize(blocks, fmt)
    ref = F.linear(x.double(), w.double())
    out = kernels.gguf_linear(x, blocks, gguf_blocks.GGML_TYPES[fmt])
    bound = _activation_error_bound(x, w) * 1.01 + 1e-4 * (1 + ref.abs())
    excess = (out.double() - ref).abs() - bound
    assert excess.max() <= 0, f"{fmt} {tuple(x.shape)}x{tuple(w.shape)}: over the bound by {excess.max():.3g}"


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("seed", range(6))
def test_kernel_matches_dequantized_reference_on_random_shapes(fmt: str, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    k = 32 * int(torch.randint(1, 40, (1,), generator=gen))  # ragged K (any multiple of 32)
    n = int(torch.randint(1, 150, (1,), generator=gen))  # ragged N (not a multiple of the row tile)
    for m in (1, 2, 3, 4, 5, 7, 33, 256):  # every tail of the 4-row pass, matrix-vector to prefill
        w = torch.randn(n, k, generator=gen) * 0.1
        x = torch.randn(m, k, generator=gen) * torch.rand(m, 1, generator=gen) * 4
        _check(x, gguf_blocks.quantize(w, fmt), fmt)


@pytest.mark.parametrize("fmt", FORMATS)
def test_kernel_on_random_block_bytes(fmt: str) -> None:
    """Arbitrary bytes (any nibbles, scales and minimums a file may hold), not only our rounding."""
    gen = torch.Generator().manual_seed(7)
    n, k = 37, 96
    blocks = torch.randint(0, 256, (n, gguf_blocks.row_bytes(fmt, k)), dtype=torch.uint8, generator=gen)
    b = blocks.view(n, -1, gguf_blocks.BLOCK_BYTES[fmt])
    halves = 2 if fmt == "q4_1" else 1  # finite fp16 scales (and minimums)
    b[..., : 2 * halves] = (torch.rand(n, k // 32, halves, generator=gen) - 0.5).half().view(torch.uint8)
    x = torch.randn(9, k, generator=gen)
    _check(x, blocks, fmt)


@pytest.mark.parametrize("fmt", ["q4_0", "q8_0"])
def test_matrix_vector_chunks_cover_every_row_once(fmt: str) -> None:
    """A matrix-vector product big enough to be cut into chunks of ~256 KB of blocks (227 rows of a
    2048-wide Q4_0 row, the last chunk ragged): every row computed, on any number of threads."""
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(2000, 2048, generator=gen) * 0.05
    blocks = gguf_blocks.quantize(w, fmt)
    for m in (1, 4):
        x = torch.randn(m, 2048, generator=gen)
        _check(x, blocks, fmt)
        one = kernels.gguf_linear(x, blocks, gguf_blocks.GGML_TYPES[fmt], 1)
        for threads in (2, 3):
            assert torch.equal(kernels.gguf_linear(x, blocks, gguf_blocks.GGML_TYPES[fmt], threads), one)


def test_edge_inputs_zero_rows_and_empty_batch() -> None:
    blocks = gguf_blocks.quantize(torch.randn(10, 64), "q4_0")
    assert kernels.gguf_linear(torch.zeros(3, 64), blocks, 2).abs().max() == 0
    assert kernels.gguf_linear(torch.zeros(0, 64), blocks, 2).shape == (0, 10)
    with pytest.raises(ValueError, match="multiple of 32"):
        kernels.gguf_linear(torch.zeros(1, 48), torch.zeros(10, 27, dtype=torch.uint8), 2)
    with pytest.raises(ValueError, match="row bytes"):
        kernels.gguf_linear(torch.zeros(1, 64), blocks, 3)  # q4_0 bytes read as q4_1
    with pytest.raises(ValueError, match="float32"):
        kernels.gguf_linear(torch.zeros(1, 64, dtype=torch.float64), blocks, 2)
    with pytest.raises(ValueError, match="block type 5"):
        kernels.gguf_linear(torch.zeros(1, 64), blocks, 5)
    with pytest.raises(ValueError, match="threads"):
        kernels.gguf_linear(torch.zeros(1, 64), blocks, 2, 0)


def test_a_bound_product_checks_its_weight_once_and_its_activations_each_call() -> None:
    """``bind`` refuses a weight that does not fit, then computes ``gguf_linear``'s bits and refuses
    activations of the wrong width, dtype or rank with a ValueError (never a crash in C++)."""
    blocks = gguf_blocks.quantize(torch.randn(10, 64), "q4_1")
    with pytest.raises(ValueError, match="row bytes"):
        kernels.bind(blocks, gguf_blocks.GGML_TYPES["q4_0"], 64)
    with pytest.raises(ValueError, match="row bytes"):
        kernels.bind(blocks, gguf_blocks.GGML_TYPES["q4_1"], 96)
    product = kernels.bind(blocks, gguf_blocks.GGML_TYPES["q4_1"], 64, repack=False)  # the loops' bits
    x = torch.randn(3, 64)
    assert torch.equal(product(x), kernels.gguf_linear(x, blocks, gguf_blocks.GGML_TYPES["q4_1"]))
    for bad in (torch.randn(3, 32), torch.randn(3, 64, dtype=torch.float64), torch.randn(64)):
        with pytest.raises(ValueError, match="of 64 columns"):
            product(bad)


@pytest.mark.parametrize("fmt", FORMATS)
def test_quantize_dequantize_error_is_within_half_a_step(fmt: str) -> None:
    """Half a step, except Q4_0's and Q5_0's clamped end: the largest magnitude maps to -8 (-16), its
    opposite to +7 (+15) (llama.cpp's rounding), a whole step off. Plus the fp16 rounding of the
    block's scale (and minimum): a relative 2^-11 of the block's largest value each."""
    w = torch.randn(20, 128)
    back = gguf_blocks.dequantize(gguf_blocks.quantize(w, fmt), fmt)
    blocks = w.reshape(20, 4, 32)
    step = {
        "q4_0": blocks.abs().amax(-1) / 8,
        "q4_1": (blocks.amax(-1) - blocks.amin(-1)) / 15,
        "q5_0": blocks.abs().amax(-1) / 16,
        "q8_0": blocks.abs().amax(-1) / 127,
    }[fmt]
    err = (back - w).abs().reshape(20, 4, 32).amax(-1)
    allowed = step * (1.0 if fmt in ("q4_0", "q5_0") else 0.5)
    assert (err <= allowed * 1.01 + blocks.abs().amax(-1) * 2.0**-10 + 1e-6).all()


def test_gguf_linear_module_adds_bias_and_keeps_leading_dims() -> None:
    w, bias = torch.randn(40, 64), torch.randn(40)
    layer = GGUFLinear(gguf_blocks.quantize(w, "q4_1"), "q4_1", 64, bias)
    x = torch.randn(2, 3, 64)
    ref = F.linear(x, gguf_blocks.dequantize(layer.blocks, "q4_1"), bias)
    assert layer(x).shape == (2, 3, 40)
    torch.testing.assert_close(layer(x), ref, atol=0.05 * ref.abs().max().item(), rtol=0)
    assert layer.weight_bytes() == 40 * 2 * 20  # 5/32 bytes per weight, vs 4 in fp32


@pytest.mark.parametrize("m", [1, 8, 64])
def test_int8_linear_error_bound_and_batch_invariance(m: int) -> None:
    """FBGEMM, reduce_range (7-bit activations): each row scaled to [-1, 1] quantizes in steps of
    2/127 of its max |x|; weights per channel in steps of max|w_row|/127. The bound adds both."""
    gen = torch.Generator().manual_seed(m)
    w, bias = torch.randn(72, 96, generator=gen), torch.randn(72, generator=gen)
    x = torch.randn(m, 96, generator=gen) * torch.rand(m, 1, generator=gen) * 10
    layer = Int8Linear(w, bias)
    out = layer(x).double()
    ref = F.linear(x.double(), w.double(), bias.double())
    x_step = x.abs().amax(1, keepdim=True).double() * 2 / 127
    w_step = w.abs().amax(1).double() / 127
    bound = (x_step / 2) * w.abs().double().sum(1) + x.abs().double() @ (w_step / 2).expand(96, 72)
    assert ((out - ref).abs() <= bound * 1.01 + 1e-4).all()
    alone = torch.cat([layer(x[i : i + 1]) for i in range(m)])
    assert torch.equal(alone, layer(x))  # a token's result does not depend on its batch


def test_gguf_product_serves_torch_until_the_kernel_is_loaded_then_the_kernel() -> None:
    # a model loaded while the kernels are being built keeps its blocks and takes the kernel on the
    # first call after it is loaded
    from radixlm.kernels.cpu.build import GGUF_KERNELS
    from radixlm.kernels.gguf_linear import GGUFProduct

    torch.manual_seed(0)
    blocks = gguf_blocks.quantize(torch.randn(48, 128), "q4_0")
    x = torch.randn(3, 128)
    released: list[bool] = []
    with GGUF_KERNELS.replaced(None):  # being built
        product = GGUFProduct(blocks, "q4_0", 128, release=lambda: released.append(True))
        assert torch.equal(product(x), F.linear(x, gguf_blocks.dequantize(blocks, "q4_0")))
    assert not released
    bound = kernels.bind(blocks, gguf_blocks.GGML_TYPES["q4_0"], 128)  # repacked where that is the default
    assert torch.equal(product(x), bound(x))
    assert released == ([True] if bound.repacked else [])  # the file's pages dropped once, if copied
    # with the kernels built, a product binds (and repacks) when it is made, not in its first call
    early = GGUFProduct(blocks, "q4_0", 128)
    assert early._kernel is not None and early._kernel.repacked == bound.repacked
