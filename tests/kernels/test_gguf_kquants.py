"""Q4_K and Q6_K super-blocks: the byte layout itself, and the C++ kernel against a torch reference.

Layout: super-blocks built byte by byte from known scales, minimums and quants (following
llama.cpp's ``block_q4_K``/``block_q6_K`` description, written out here independently of
``gguf_kquants``) must dequantize to the values those numbers define, in our dequantizer and in
gguf-py's. Kernel: as in test_gguf_linear.py, the reference is the blocks dequantized then ``F.linear``
in float64, and the bound is the rounding of activations to int8 blocks of 32, computed from the data.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType
from gguf.quants import dequantize as gguf_py_dequantize
from gguf.quants import quantize as gguf_py_quantize

from radixlm.kernels.cpu import gguf_blocks
from tests.helpers.built_kernels import gguf_kernels, needs_cpu_kernels
from tests.kernels.test_gguf_linear import _check

kernels = gguf_kernels
K_FORMATS = ["q4_k", "q6_k"]
GGML = {"q4_k": GGMLQuantizationType.Q4_K, "q6_k": GGMLQuantizationType.Q6_K}


def _fp16(value: float) -> list[int]:
    return list(np.array([value], dtype=np.float16).view(np.uint8))


def _hand_q4_k() -> tuple[torch.Tensor, torch.Tensor]:
    """One Q4_K super-block and the 256 values it stands for."""
    d, dmin = 0.25, 0.125
    scales = [1, 5, 17, 63, 32, 48, 2, 33]  # 6 bits; the last four use the split high bits
    mins = [0, 7, 40, 63, 16, 1, 59, 34]
    quants = [(7 * e + e // 32) % 16 for e in range(256)]
    packed = [0] * 12
    for j in range(4):
        packed[j] = scales[j] | ((scales[j + 4] >> 4) << 6)
        packed[j + 4] = mins[j] | ((mins[j + 4] >> 4) << 6)
        packed[j + 8] = (scales[j + 4] & 0x0F) | ((mins[j + 4] & 0x0F) << 4)
    nibbles = [0] * 128
    for e in range(256):  # sub-block j = e // 32: bytes 32 * (j // 2) .., low nibble when j is even
        j, lane = e // 32, e % 32
        nibbles[32 * (j // 2) + lane] |= quants[e] << (4 * (j % 2))
    data = _fp16(d) + _fp16(dmin) + packed + nibbles
    values = [d * scales[e // 32] * quants[e] - dmin * mins[e // 32] for e in range(256)]
    return torch.tensor([data], dtype=torch.uint8), torch.tensor([values])


def _hand_q6_k() -> tuple[torch.Tensor, torch.Tensor]:
    """One Q6_K super-block and the 256 values it stands for."""
    d = 0.5
    scales = [i - 8 if i % 3 else 120 - i for i in range(16)]  # signed int8, one per 16 weights
    quants = [(11 * e + 5) % 64 for e in range(256)]
    ql, qh = [0] * 128, [0] * 64
    for e in range(256):  # half h of 128; within it group g of 32, lane l
        h, g, lane = e // 128, (e % 128) // 32, e % 32
        q = quants[e]
        ql[64 * h + 32 * (g % 2) + lane] |= (q & 0x0F) << (4 * (g // 2))
        qh[32 * h + lane] |= (q >> 4) << (2 * g)
    data = ql + qh + list(np.array(scales, dtype=np.int8).view(np.uint8)) + _fp16(d)
    values = [d * scales[e // 16] * (quants[e] - 32) for e in range(256)]
    return torch.tensor([data], dtype=torch.uint8), torch.tensor([values])


@pytest.mark.parametrize("fmt", K_FORMATS)
def test_hand_built_super_block_dequantizes_to_its_defined_values(fmt: str) -> None:
    blocks, values = _hand_q4_k() if fmt == "q4_k" else _hand_q6_k()
    assert blocks.shape == (1, gguf_blocks.BLOCK_BYTES[fmt])
    torch.testing.assert_close(gguf_blocks.dequantize(blocks, fmt), values, atol=0, rtol=0)
    theirs = torch.from_numpy(gguf_py_dequantize(blocks.numpy(), GGML[fmt]))
    torch.testing.assert_close(theirs, values, atol=0, rtol=0)


@pytest.mark.parametrize("fmt", K_FORMATS)
def test_dequantizer_matches_gguf_py_on_arbitrary_bytes(fmt: str) -> None:
    blocks = _random_blocks(fmt, 9, 768, seed=1)
    ours = gguf_blocks.dequantize(blocks, fmt)
    assert torch.equal(ours, torch.from_numpy(gguf_py_dequantize(blocks.numpy(), GGML[fmt])))


@pytest.mark.parametrize("fmt", K_FORMATS)
def test_quantizer_roundtrip_error(fmt: str) -> None:
    """Q6_K: a step is 1/32 of each 16-weight group's largest magnitude (which maps to -32); the
    error is up to a whole step (a weight of the other sign near that magnitude maps past +31 and is
    clamped, as in llama.cpp), plus 32 times the rounding of the group's int8 scale (half of ``d``).
    Q4_K: the group scale and minimum are 6 bits of the super-block's largest, so the error is up to
    a step (range / 15) of the 32-weight group plus the rounding of both; llama.cpp's search does
    better, our simple rounding only needs to be sound."""
    w = torch.randn(12, 512)
    back = gguf_blocks.dequantize(gguf_blocks.quantize(w, fmt), fmt)
    if fmt == "q6_k":
        groups, err = w.reshape(12, 2, 16, 16), (back - w).abs().reshape(12, 2, 16, 16)
        step = groups.abs().amax(-1, keepdim=True) / 32
        d = step.amax(dim=(2, 3), keepdim=True) / 127
        assert (err <= step + 16 * d + 1e-6).all()
    else:
        groups, err = w.reshape(12, 2, 8, 32), (back - w).abs().reshape(12, 2, 8, 32)
        step = (groups.amax(-1, keepdim=True) - groups.amin(-1, keepdim=True).clamp(max=0)) / 15
        super_step = step.amax(dim=(2, 3), keepdim=True) / 63
        floor_step = (-groups.amin(-1, keepdim=True)).clamp(min=0).amax(dim=(2, 3), keepdim=True) / 63
        assert (err <= step + 8 * super_step + floor_step + 1e-6).all()


needs_kernels = needs_cpu_kernels


def _random_blocks(fmt: str, n: int, k: int, seed: int) -> torch.Tensor:
    """Arbitrary bytes (any quants, scales and minimums a file may hold) with finite fp16 d/dmin."""
    gen = torch.Generator().manual_seed(seed)
    blocks = torch.randint(0, 256, (n, gguf_blocks.row_bytes(fmt, k)), dtype=torch.uint8, generator=gen)
    b = blocks.view(n, -1, gguf_blocks.BLOCK_BYTES[fmt])
    halves = (torch.rand(n, k // 256, 2, generator=gen) * 0.02).half().view(torch.uint8)
    if fmt == "q4_k":
        b[..., 0:4] = halves
    else:
        b[..., 208:210] = halves[..., 0:2]
    return blocks


def test_q5_0_blocks_are_llama_cpps() -> None:
    """Q5_0, which llama.cpp writes in a Q4_K_M file for rows that are not whole super-blocks: our
    quantizer gives gguf-py's (llama.cpp's reference) bytes, our dequantizer its values."""
    w = torch.randn(9, 160)
    ours = gguf_blocks.quantize(w, "q5_0")
    assert torch.equal(ours, torch.from_numpy(gguf_py_quantize(w.numpy(), GGMLQuantizationType.Q5_0)))
    gen = torch.Generator().manual_seed(2)
    blocks = torch.randint(0, 256, (9, gguf_blocks.row_bytes("q5_0", 160)), dtype=torch.uint8, generator=gen)
    blocks.view(9, 5, 22)[..., 0:2] = (torch.rand(9, 5, 1, generator=gen) - 0.5).half().view(torch.uint8)
    theirs = torch.from_numpy(gguf_py_dequantize(blocks.numpy(), GGMLQuantizationType.Q5_0))
    assert torch.equal(gguf_blocks.dequantize(blocks, "q5_0"), theirs)


@needs_kernels
@pytest.mark.parametrize("fmt", K_FORMATS)
@pytest.mark.parametrize("seed", range(4))
def test_kernel_matches_dequantized_reference_on_random_shapes(fmt: str, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    k = 256 * int(torch.randint(1, 7, (1,), generator=gen))
    n = int(torch.randint(1, 150, (1,), generator=gen))  # ragged N (not a multiple of the row tile)
    for m in (1, 2, 3, 4, 5, 7, 33, 256):
        w = torch.randn(n, k, generator=gen) * 0.1
        x = torch.randn(m, k, generator=gen) * torch.rand(m, 1, generator=gen) * 4
        _check(x, gguf_blocks.quantize(w, fmt), fmt)


@needs_kernels
@pytest.mark.parametrize("fmt", K_FORMATS)
def test_kernel_on_random_block_bytes(fmt: str) -> None:
    gen = torch.Generator().manual_seed(11)
    for m in (1, 6, 64):
        _check(torch.randn(m, 512, generator=gen), _random_blocks(fmt, 41, 512, seed=m), fmt)


@needs_kernels
@pytest.mark.parametrize("fmt", K_FORMATS)
def test_kernel_on_hand_built_blocks(fmt: str) -> None:
    blocks, _ = _hand_q4_k() if fmt == "q4_k" else _hand_q6_k()
    _check(torch.randn(3, 256), blocks.repeat(5, 1), fmt)


@needs_kernels
def test_kernel_refuses_rows_that_are_not_whole_super_blocks() -> None:
    blocks = gguf_blocks.quantize(torch.randn(4, 256), "q6_k")
    with pytest.raises(ValueError, match="multiple of 256"):
        kernels.gguf_linear(torch.zeros(1, 288), torch.zeros(4, 9 * 18, dtype=torch.uint8), 12)
    with pytest.raises(ValueError, match="row bytes"):
        kernels.gguf_linear(torch.zeros(1, 256), blocks, 12)  # q6_k bytes read as q4_k
    with pytest.raises(ValueError, match="multiple of 256"):
        gguf_blocks.quantize(torch.randn(4, 96), "q4_k")
