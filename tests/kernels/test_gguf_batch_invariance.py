"""A token's output from the GGUF kernel does not depend on the batch it is in.

The kernel walks activation rows in passes of 1-4 and weight rows in tiles of 1-4 (Q4_0, Q4_1,
Q4_K, Q6_K repacked: groups of eight, tiles of 1-2 groups), and splits large products over threads;
deterministic inference (``--enable-deterministic-inference``) needs each output element to come out
bit-identical whichever of those paths computed it.
"""

from __future__ import annotations

import pytest
import torch

from radixlm.kernels.cpu import gguf_blocks
from tests.helpers.built_kernels import gguf_kernels, needs_cpu_kernels

kernels = gguf_kernels
pytestmark = needs_cpu_kernels


# Q4_0, Q4_1, Q4_K, Q6_K twice: the file's blocks and the groups of eight interleaved rows
# (cpu/gguf_interleave.cpp, gguf_interleave_q4_1.cpp, gguf_interleave_k.cpp)
GROUPED = ("q4_0", "q4_1", "q4_k", "q6_k")
CASES = [(fmt, False) for fmt in gguf_blocks.GGML_TYPES] + [(fmt, True) for fmt in GROUPED]


@pytest.mark.parametrize("fmt,repack", CASES)
@pytest.mark.parametrize("n", [37, 1100])  # a ragged row count; one big enough to run on threads
def test_each_row_is_bit_identical_alone_and_in_any_batch(fmt: str, repack: bool, n: int) -> None:
    gen = torch.Generator().manual_seed(n)
    k = 288 if gguf_blocks.BLOCK_ELEMENTS[fmt] == 32 else 512  # K-quants: whole super-blocks of 256
    blocks = gguf_blocks.quantize(torch.randn(n, k, generator=gen) * 0.1, fmt)
    x = torch.randn(70, k, generator=gen) * torch.rand(70, 1, generator=gen) * 3
    product = kernels.bind(blocks, gguf_blocks.GGML_TYPES[fmt], k, repack=repack)
    assert product.repacked == repack
    alone = torch.cat([product(x[i : i + 1], 1) for i in range(len(x))])
    for threads in (1, 2, 3):
        for m in range(1, 65):
            start = m % 7  # rows land at every position within the kernel's 4-row passes
            batch = product(x[start : start + m], threads)
            assert torch.equal(batch, alone[start : start + m]), f"{fmt} batch {m} threads {threads}"


def test_concurrent_callers_get_their_own_results() -> None:
    """Two Python threads in one process (two engines) use the kernels' thread pool at once."""
    import threading

    gen = torch.Generator().manual_seed(3)
    blocks = gguf_blocks.quantize(torch.randn(2048, 256, generator=gen), "q4_1")
    inputs = [torch.randn(3, 256, generator=gen) for _ in range(4)]
    expected = [kernels.gguf_linear(x, blocks, 3, 1) for x in inputs]
    failures: list[int] = []

    def work(i: int) -> None:
        for _ in range(30):
            if not torch.equal(kernels.gguf_linear(inputs[i], blocks, 3, 2), expected[i]):
                failures.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads) and failures == []


@pytest.mark.parametrize("watch_us", ["0", "5000"])
def test_helpers_watching_or_sleeping_give_the_same_results(watch_us: str) -> None:
    """RADIXLM_GGUF_SPIN_US (how long helpers watch for the next product before sleeping; 0: they
    sleep at once, so every product wakes them) changes no result."""
    import os
    import subprocess
    import sys

    script = (
        "import torch\n"
        "from radixlm.kernels.cpu import gguf_blocks\n"
        "from radixlm.kernels.cpu.build import load_gguf_kernels\n"
        "k = load_gguf_kernels()\n"
        "g = torch.Generator().manual_seed(5)\n"
        "b = gguf_blocks.quantize(torch.randn(4096, 256, generator=g), 'q4_0')\n"
        "x = torch.randn(2, 256, generator=g)\n"
        "ref = k.gguf_linear(x, b, 2, 1)\n"
        "assert all(torch.equal(k.gguf_linear(x, b, 2, 2), ref) for _ in range(50))\n"
        "print('ok')\n"
    )
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2])  # this checkout's radixlm, not an installed one
    env = {
        **os.environ,
        "RADIXLM_GGUF_SPIN_US": watch_us,
        "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]),
    }
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]


@pytest.mark.parametrize("fmt,repack", [("q4_0", True), ("q6_k", True), ("q4_0", False)])
def test_one_pass_products_are_the_same_whatever_their_work_items(fmt: str, repack: bool) -> None:
    """Decode-sized products share their rows out in longer work items than batched ones; the
    size decides only which thread computes a row, never its bits (a wrong item bound leaves rows
    unwritten or written twice)."""
    gen = torch.Generator().manual_seed(5)
    n, k = 3000, 512
    blocks = gguf_blocks.quantize(torch.randn(n, k, generator=gen) * 0.1, fmt)
    product = kernels.bind(blocks, gguf_blocks.GGML_TYPES[fmt], k, repack=repack)
    x = torch.randn(3, k, generator=gen)
    with kernels.one_pass_chunk_bytes(1):  # the smallest items: kMinChunkRows rows
        expected = product(x, 1)
    for nbytes in (1 << 12, 1 << 18, 1 << 21, 1 << 30):
        with kernels.one_pass_chunk_bytes(nbytes):
            for threads in (2, 3):
                assert torch.equal(product(x, threads), expected), f"{nbytes} bytes, {threads} threads"
    with pytest.raises(ValueError, match="nbytes"):
        with kernels.one_pass_chunk_bytes(0):
            pass
