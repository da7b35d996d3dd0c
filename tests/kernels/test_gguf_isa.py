"""The GGUF kernel's two instruction-set paths: AVX-512 VNNI (``_mm256_dpbusd_epi32``, larger tiles)
and AVX2 (``maddubs`` + ``madd``) must give the same bits, and each must match the dequantized
float64 reference within the activation-rounding bound of test_gguf_linear.py, for every block
format, ragged shapes, 1 to many activation rows (every tail of a pass and of a tile of weight rows)
and 1 or 2 threads. The AVX2 path is forced with ``use_isa``; the VNNI cases are skipped, with the
reason, on a CPU without AVX-512 F/BW/VL/VNNI.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from radixlm.kernels.cpu import gguf_blocks
from tests.helpers.built_kernels import gguf_kernels, needs_cpu_kernels
from tests.kernels.test_gguf_linear import _activation_error_bound

kernels = gguf_kernels
pytestmark = needs_cpu_kernels
FORMATS = list(gguf_blocks.GGML_TYPES)
VNNI = "avx512vnni"


def _needs_vnni() -> None:
    if VNNI not in kernels.available_isas():
        pytest.skip("this CPU lacks AVX-512 F/BW/VL/VNNI: only the AVX2 path can run here")


def _product(isa: str, x: torch.Tensor, blocks: torch.Tensor, fmt: str, threads: int) -> torch.Tensor:
    with kernels.use_isa(isa):
        return kernels.gguf_linear(x, blocks, gguf_blocks.GGML_TYPES[fmt], threads)


def _check_reference(out: torch.Tensor, x: torch.Tensor, blocks: torch.Tensor, fmt: str) -> None:
    w = gguf_blocks.dequantize(blocks, fmt)
    ref = F.linear(x.double(), w.double())
    bound = _activation_error_bound(x, w) * 1.01 + 1e-4 * (1 + ref.abs())
    excess = (out.double() - ref).abs() - bound
    assert excess.max() <= 0, f"{fmt} {tuple(x.shape)}x{tuple(w.shape)}: over the bound by {excess.max():.3g}"


def _random_case(fmt: str, seed: int) -> tuple[torch.Tensor, int]:
    gen = torch.Generator().manual_seed(seed)
    unit = gguf_blocks.BLOCK_ELEMENTS[fmt]
    k = unit * int(torch.randint(1, 2048 // unit + 2, (1,), generator=gen))
    n = int(torch.randint(1, 70, (1,), generator=gen))  # not a multiple of any tile's rows
    return gguf_blocks.quantize(torch.randn(n, k, generator=gen) * 0.1, fmt), k


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("seed", range(3))
def test_both_paths_match_the_reference_and_each_other(fmt: str, seed: int) -> None:
    blocks, k = _random_case(fmt, seed)
    gen = torch.Generator().manual_seed(100 + seed)
    have_vnni = VNNI in kernels.available_isas()
    for m in (1, 2, 3, 4, 5, 6, 7, 9, 33):
        x = torch.randn(m, k, generator=gen) * torch.rand(m, 1, generator=gen) * 4
        for threads in (1, 2):
            avx2 = _product("avx2", x, blocks, fmt, threads)
            _check_reference(avx2, x, blocks, fmt)
            if have_vnni:
                vnni = _product(VNNI, x, blocks, fmt, threads)
                assert torch.equal(vnni, avx2), f"{fmt} m={m} threads={threads}: the paths' bits differ"
    if not have_vnni:
        pytest.skip("this CPU lacks AVX-512 F/BW/VL/VNNI: only the AVX2 path was checked")


@pytest.mark.parametrize("fmt", FORMATS)
def test_vnni_path_on_extreme_block_bytes(fmt: str) -> None:
    """Arbitrary bytes, and the largest magnitudes (Q8_0's -128 quants against activations at +-127,
    where an int16 pair sum is nearest to saturating): still the AVX2 path's bits."""
    _needs_vnni()
    gen = torch.Generator().manual_seed(11)
    unit = gguf_blocks.BLOCK_ELEMENTS[fmt]
    n, k = 23, 2 * unit
    blocks = torch.randint(0, 256, (n, gguf_blocks.row_bytes(fmt, k)), dtype=torch.uint8, generator=gen)
    if unit == gguf_blocks.BLOCK:  # finite fp16 scales (and minimums) at the front of each block
        b = blocks.view(n, -1, gguf_blocks.BLOCK_BYTES[fmt])
        halves = 2 if fmt == "q4_1" else 1
        b[..., : 2 * halves] = (torch.rand(n, k // 32, halves, generator=gen) - 0.5).half().view(torch.uint8)
        if fmt == "q8_0":
            b[:3, :, 2:] = 0x80  # -128 in every quant of the first rows
    else:  # finite fp16 super-block scales: Q4_K's d, dmin at the front, Q6_K's d at the end
        b = blocks.view(n, -1, gguf_blocks.BLOCK_BYTES[fmt])
        at = slice(0, 4) if fmt == "q4_k" else slice(208, 210)
        count = 2 if fmt == "q4_k" else 1
        b[..., at] = (torch.rand(n, k // unit, count, generator=gen) - 0.5).half().view(torch.uint8)
    x = torch.randn(6, k, generator=gen)
    x[:3] = torch.where(torch.arange(k) % 2 == 0, 1.0, -1.0)  # every activation quantizes to +-127
    for threads in (1, 2):
        avx2 = _product("avx2", x, blocks, fmt, threads)
        assert torch.equal(_product(VNNI, x, blocks, fmt, threads), avx2)
    _check_reference(avx2, x, blocks, fmt)


def test_a_row_is_bit_identical_alone_and_in_a_batch_on_the_vnni_path() -> None:
    """Batch invariance on the VNNI path: tiles of several weight rows and passes of up to four
    activation rows never change a row's arithmetic."""
    _needs_vnni()
    gen = torch.Generator().manual_seed(5)
    for fmt in FORMATS:
        blocks = gguf_blocks.quantize(torch.randn(45, 512, generator=gen), fmt)
        x = torch.randn(11, 512, generator=gen)
        batch = _product(VNNI, x, blocks, fmt, 2)
        for i in (0, 3, 4, 10):
            assert torch.equal(_product(VNNI, x[i : i + 1], blocks, fmt, 1), batch[i : i + 1])


# per grouped format with a VNNI build: in_features
GROUPED_VNNI = {"q4_0": 640, "q4_1": 640, "q4_k": 768, "q6_k": 768}


def _extreme_blocks(blocks: torch.Tensor, fmt: str, rows: int) -> torch.Tensor:
    """``blocks`` with the first ``rows`` rows at the largest integer sums the products can reach:
    4-bit quants alternating nibbles 0 and 15 (a Q4_K's 6-bit scales and minimums all 63), a
    Q6_K's quants all -32 with its int8 scales at -128."""
    out = blocks.clone().view(blocks.shape[0], -1, gguf_blocks.BLOCK_BYTES[fmt])
    if fmt == "q6_k":  # ql, qh: 0 (q - 32 = -32); scales: -128; d (the last two bytes) kept
        out[:rows, :, :192] = 0
        out[:rows, :, 192:208] = 0x80
        return out.view(blocks.shape[0], -1)
    quants = {"q4_0": 2, "q4_1": 4, "q4_k": 16}[fmt]  # the first quant byte of a block
    nibbles = torch.tensor([0x0F, 0xF0], dtype=torch.uint8)
    out[:rows, :, quants:] = nibbles.repeat((out.shape[-1] - quants) // 2)
    if fmt == "q4_k":
        out[:rows, :, 4:16] = 0xFF
    return out.view(blocks.shape[0], -1)


@pytest.mark.parametrize("fmt", list(GROUPED_VNNI))
def test_grouped_products_give_the_avx2_bits_on_the_vnni_path(fmt: str) -> None:
    """Weights repacked in groups of eight rows: the VNNI builds (dpbusd into int32; the K-quants:
    two groups a 512-bit register, scales multiplied in int32, Q6_K's sign trick replaced by q + 32
    and the activations' half sums) against the AVX2 ones, ragged rows and every pass length, 1 and 2
    threads; and the largest magnitudes (every activation at +-127 against ``_extreme_blocks``)."""
    _needs_vnni()
    gen = torch.Generator().manual_seed(21)
    k = GROUPED_VNNI[fmt]
    blocks = gguf_blocks.quantize(torch.randn(77, k, generator=gen) * 0.1, fmt)
    for weight in (blocks, _extreme_blocks(blocks, fmt, 9)):
        bound = kernels.bind(weight, gguf_blocks.GGML_TYPES[fmt], k, repack=True)
        assert bound.repacked
        for m in (1, 2, 3, 4, 5, 7, 9, 33):
            x = torch.randn(m, k, generator=gen)
            x[: m // 2] = torch.where(torch.arange(k) % 3 == 0, 1.0, -1.0)  # quantized to +-127
            for threads in (1, 2):
                with kernels.use_isa("avx2"):
                    avx2 = bound(x, threads)
                with kernels.use_isa(VNNI):
                    vnni = bound(x, threads)
                assert torch.equal(vnni, avx2), f"{fmt} m={m} threads={threads}"
        ref = F.linear(x.double(), gguf_blocks.dequantize(weight, fmt).double())
        bound_err = _activation_error_bound(x, gguf_blocks.dequantize(weight, fmt)) * 1.01 + 1e-4 * (
            1 + ref.abs()
        )
        assert ((vnni.double() - ref).abs() <= bound_err).all()


def test_an_unknown_instruction_set_is_refused() -> None:
    with pytest.raises(ValueError, match="not available"):
        kernels.set_isa("avx9000")
    assert kernels.isa in kernels.available_isas()
