"""Q4_0 repacked into groups of eight interleaved rows (``cpu/gguf_interleave.cpp``) against the
dequantized fp32 reference, its batch invariance, and the ``RADIXLM_GGUF_REPACK`` switch.

The bound is test_gguf_linear.py's: the only approximation is rounding the activations to int8
blocks of 32 (plus fp32 accumulation rounding)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from radixlm.kernels.cpu import gguf_blocks
from tests.helpers.built_kernels import gguf_kernels, needs_cpu_kernels

kernels = gguf_kernels
pytestmark = needs_cpu_kernels
Q4_0 = gguf_blocks.GGML_TYPES["q4_0"]


def _check(out: torch.Tensor, x: torch.Tensor, blocks: torch.Tensor) -> None:
    w = gguf_blocks.dequantize(blocks, "q4_0")
    ref = F.linear(x.double(), w.double())
    m, k = x.shape
    half_step = x.abs().reshape(m, k // 32, 32).amax(-1) / 127 / 2
    bound = half_step.repeat_interleave(32, dim=1).double() @ w.abs().double().T
    excess = (out.double() - ref).abs() - (bound * 1.01 + 1e-4 * (1 + ref.abs()))
    assert excess.max() <= 0, f"{tuple(x.shape)}x{tuple(w.shape)}: over the bound by {excess.max():.3g}"


@pytest.mark.parametrize("n,k", [(8, 32), (13, 32), (37, 288), (64, 1024), (203, 96)])
def test_repacked_matches_dequantized_reference(n: int, k: int) -> None:
    """N a multiple of 8 and not (the last group padded), K of one block and many."""
    gen = torch.Generator().manual_seed(n * k)
    blocks = gguf_blocks.quantize(torch.randn(n, k, generator=gen) * 0.1, "q4_0")
    product = kernels.bind(blocks, Q4_0, k, repack=True)
    assert product.repacked and product.weight.shape == ((n + 7) // 8, k // 32 * 144)
    for m in (1, 2, 3, 5, 8, 17, 33):
        x = torch.randn(m, k, generator=gen) * torch.rand(m, 1, generator=gen) * 4
        _check(product(x), x, blocks)


def test_repacked_on_random_block_bytes_and_extreme_activations() -> None:
    """Any nibbles a file may hold, and activations that round to +-127 everywhere (the int16 sums'
    worst case: 8 maddubs of 2 * 15 * 127 each stay under 32767)."""
    gen = torch.Generator().manual_seed(11)
    n, k = 19, 256
    blocks = torch.randint(0, 256, (n, gguf_blocks.row_bytes("q4_0", k)), dtype=torch.uint8, generator=gen)
    b = blocks.view(n, -1, 18)
    b[..., :2] = (torch.rand(n, k // 32, 1, generator=gen) - 0.5).half().view(torch.uint8)
    b[0, :, 2:] = 0xFF  # all nibbles 15
    product = kernels.bind(blocks, Q4_0, k, repack=True)
    x = torch.randn(6, k, generator=gen)
    x[0] = 1.0
    x[1] = -1.0
    _check(product(x), x, blocks)


@pytest.mark.parametrize("n", [37, 1100])  # a ragged group; one big enough to run on threads
def test_repacked_rows_are_bit_identical_alone_and_in_any_batch(n: int) -> None:
    gen = torch.Generator().manual_seed(n)
    k = 288
    blocks = gguf_blocks.quantize(torch.randn(n, k, generator=gen) * 0.1, "q4_0")
    product = kernels.bind(blocks, Q4_0, k, repack=True)
    x = torch.randn(40, k, generator=gen) * torch.rand(40, 1, generator=gen) * 3
    alone = torch.cat([product(x[i : i + 1], 1) for i in range(len(x))])
    for threads in (1, 2, 3):
        for m in (2, 3, 4, 5, 8, 9, 17, 33):
            start = m % 7
            assert torch.equal(product(x[start : start + m], threads), alone[start : start + m]), (m, threads)


def test_repack_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    """RADIXLM_GGUF_REPACK=0/1 forces bind's default (on); Q8_0 is never repacked."""
    blocks = gguf_blocks.quantize(torch.randn(16, 64), "q4_0")
    monkeypatch.setenv("RADIXLM_GGUF_REPACK", "0")
    assert not kernels.repack_by_default() and not kernels.bind(blocks, Q4_0, 64).repacked
    monkeypatch.setenv("RADIXLM_GGUF_REPACK", "1")
    assert kernels.repack_by_default() and kernels.bind(blocks, Q4_0, 64).repacked
    q8 = gguf_blocks.quantize(torch.randn(16, 64), "q8_0")
    assert not kernels.bind(q8, gguf_blocks.GGML_TYPES["q8_0"], 64).repacked
    monkeypatch.delenv("RADIXLM_GGUF_REPACK")
    assert kernels.repack_by_default()  # on by default, whatever the instruction set


def test_env_switch_reaches_a_fresh_process() -> None:
    """RADIXLM_GGUF_REPACK=1 also routes the one-off ``gguf_linear`` through the groups (so the
    other kernel tests can be run against the new path)."""
    script = (
        "import torch\n"
        "from radixlm.kernels.cpu import gguf_blocks\n"
        "from radixlm.kernels.cpu.build import load_gguf_kernels\n"
        "k = load_gguf_kernels()\n"
        "b = gguf_blocks.quantize(torch.randn(20, 64), 'q4_0')\n"
        "x = torch.randn(3, 64)\n"
        "assert torch.equal(k.gguf_linear(x, b, 2), k.bind(b, 2, 64, repack=True)(x))\n"
        "print('ok')\n"
    )
    root = str(Path(__file__).resolve().parents[2])
    env = {
        **os.environ,
        "RADIXLM_GGUF_REPACK": "1",
        "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]),
    }
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]
