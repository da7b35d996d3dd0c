"""Q4_K and Q6_K repacked into groups of eight interleaved rows (``cpu/gguf_interleave_k.cpp``): the
bytes against a torch statement of the layouts, and the products against the dequantized fp32
reference (test_gguf_linear.py's bound: only the activations' rounding to int8 blocks of 32)."""

from __future__ import annotations

import pytest
import torch

from radixlm.kernels.cpu import gguf_blocks, gguf_kquants
from tests.helpers.built_kernels import gguf_kernels, needs_cpu_kernels
from tests.kernels.test_gguf_kquants import _random_blocks
from tests.kernels.test_gguf_linear import _activation_error_bound

kernels = gguf_kernels
pytestmark = needs_cpu_kernels
K_FORMATS = ["q4_k", "q6_k"]


def _groups(blocks: torch.Tensor, fmt: str) -> torch.Tensor:
    """[groups, super-blocks, 8, bytes]: the rows padded with zero rows to a multiple of 8."""
    n, size = blocks.shape[0], gguf_kquants.KQUANT_BYTES[fmt]
    ns = blocks.shape[1] // size
    padded = torch.zeros((n + 7) // 8 * 8, ns, size, dtype=torch.uint8)
    padded[:n] = blocks.view(n, ns, size)
    return padded.view(-1, 8, ns, size).permute(0, 2, 1, 3)


def _words(values: torch.Tensor) -> torch.Tensor:
    """[..., 8 rows, 4w bytes] -> [..., w words of 32 bytes]: word c holds each row's bytes 4c..4c+3."""
    *lead, rows, nbytes = values.shape
    return values.reshape(*lead, rows, nbytes // 4, 4).transpose(-3, -2).reshape(*lead, nbytes * 8)


def reference_q4_k(blocks: torch.Tensor) -> torch.Tensor:
    g = _groups(blocks, "q4_k")  # [G, S, 8, 144]
    scales, mins = gguf_kquants._q4_k_scales(g[..., 4:16])  # [G, S, 8 rows, 8 sub-blocks]
    chunks = g[..., 16:].reshape(*g.shape[:3], 4, 32).transpose(2, 3)  # [G, S, chunk, 8 rows, 32]
    parts = [
        g[..., 0:2].flatten(-2),
        g[..., 2:4].flatten(-2),
        scales.transpose(-1, -2).to(torch.uint8).flatten(-2),
        mins.transpose(-1, -2).to(torch.uint8).flatten(-2),
        _words(chunks).flatten(-2),
    ]
    return torch.cat(parts, dim=-1).reshape(g.shape[0], -1)


def reference_q6_k(blocks: torch.Tensor) -> torch.Tensor:
    g = _groups(blocks, "q6_k")  # [G, S, 8, 210]
    n = g.shape[0] * g.shape[1] * 8
    q = (gguf_kquants.dequantize(_unit_scales(g.reshape(n, 210)), "q6_k") + 32).round().to(torch.int32)
    q = q.reshape(*g.shape[:3], 8, 32)  # [G, S, row, sub-block j, 32]: 0..63
    low, high = q[..., :16], q[..., 16:]
    nibbles = ((low & 15) | ((high & 15) << 4)).to(torch.uint8)  # byte 4c + t: weights 4c + t, 16 + 4c + t
    shifts = 2 * torch.arange(4).repeat_interleave(4)  # weight 4c + t -> bits 2c
    top = [((h >> 4) << shifts).reshape(*h.shape[:-1], 4, 4).sum(-2).to(torch.uint8) for h in (low, high)]
    per_block = [_words(part.transpose(2, 3)) for part in (nibbles, *top)]
    blocks_part = torch.cat(per_block, dim=-1).flatten(-2)  # [G, S, 8 * 192]
    scales = g[..., 192:208].reshape(*g.shape[:3], 8, 2).permute(0, 1, 3, 4, 2).flatten(-3)  # [j][h][r]
    return torch.cat([g[..., 208:210].flatten(-2), scales, blocks_part], dim=-1).reshape(g.shape[0], -1)


def _unit_scales(blocks: torch.Tensor) -> torch.Tensor:
    """Q6_K blocks with d = 1 and every scale 1: dequantize then gives q - 32."""
    ones = blocks.clone()
    ones[:, 192:208] = 1
    ones[:, 208:210] = torch.tensor([1.0], dtype=torch.float16).view(torch.uint8)
    return ones


REFERENCES = {"q4_k": reference_q4_k, "q6_k": reference_q6_k}


@pytest.mark.parametrize("fmt", K_FORMATS)
@pytest.mark.parametrize("n,k", [(8, 256), (13, 256), (37, 768), (203, 512)])
def test_repacked_bytes_match_the_layout(fmt: str, n: int, k: int) -> None:
    blocks = _random_blocks(fmt, n, k, seed=n + k)
    packed = kernels.bind(blocks, gguf_blocks.GGML_TYPES[fmt], k, repack=True).weight
    assert packed.is_contiguous() and torch.equal(packed, REFERENCES[fmt](blocks))


def _check(out: torch.Tensor, x: torch.Tensor, blocks: torch.Tensor, fmt: str) -> None:
    w = gguf_blocks.dequantize(blocks, fmt)
    ref = torch.nn.functional.linear(x.double(), w.double())
    bound = _activation_error_bound(x, w) * 1.01 + 1e-4 * (1 + ref.abs())
    excess = (out.double() - ref).abs() - bound
    assert excess.max() <= 0, f"{fmt} {tuple(x.shape)}x{tuple(w.shape)}: over the bound by {excess.max():.3g}"


@pytest.mark.parametrize("fmt", K_FORMATS)
@pytest.mark.parametrize("n,k", [(8, 256), (13, 256), (37, 768), (203, 512)])
def test_repacked_matches_dequantized_reference(fmt: str, n: int, k: int) -> None:
    """N a multiple of 8 and not (the last group padded); every tail of the 4-row pass."""
    gen = torch.Generator().manual_seed(n * k)
    blocks = gguf_blocks.quantize(torch.randn(n, k, generator=gen) * 0.1, fmt)
    product = kernels.bind(blocks, gguf_blocks.GGML_TYPES[fmt], k, repack=True)
    assert product.repacked and product.weight.shape[0] == (n + 7) // 8
    for m in (1, 2, 3, 4, 5, 8, 17, 33):
        x = torch.randn(m, k, generator=gen) * torch.rand(m, 1, generator=gen) * 4
        _check(product(x), x, blocks, fmt)


@pytest.mark.parametrize("fmt", K_FORMATS)
def test_repacked_on_random_block_bytes_and_extreme_activations(fmt: str) -> None:
    """Any quants, scales and minimums a file may hold, and activations that round to +-127
    everywhere (the int16 sums' worst case), against the block loops too."""
    gen = torch.Generator().manual_seed(5)
    n, k = 19, 512
    blocks = _random_blocks(fmt, n, k, seed=3)
    size = gguf_kquants.KQUANT_BYTES[fmt]
    view = blocks.view(n, k // 256, size)
    if fmt == "q4_k":
        view[0, :, 4:16] = 0xFF  # every scale and minimum 63
        view[0, :, 16:] = 0xFF  # every nibble 15
    else:
        view[0, :, :192] = 0  # every q - 32 = -32
        view[0, :, 192:208] = 0x80  # every scale -128
    product = kernels.bind(blocks, gguf_blocks.GGML_TYPES[fmt], k, repack=True)
    x = torch.randn(6, k, generator=gen)
    x[0] = 1.0
    x[1] = -1.0
    _check(product(x), x, blocks, fmt)
    loops = kernels.bind(blocks, gguf_blocks.GGML_TYPES[fmt], k, repack=False)(x)
    assert torch.allclose(product(x), loops, rtol=1e-4, atol=1e-3 * float(loops.abs().max()))
