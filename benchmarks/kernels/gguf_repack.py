"""Q4_0/Q4_1/Q4_K/Q6_K products: the file's blocks (gguf_gemm.h's loops) against the groups of eight
interleaved rows (cpu/gguf_interleave*.cpp), in one process, on a ~1.5B
Llama's layer shapes, at 1-32 rows.

Random blocks (``--format``, default q4_0: random quants and scales, fp16 scales in +-0.05, K-quants'
d in 0..0.02). Each call reads its weight from memory as a decode step does: calls cycle through
copies of the weight larger than the L3 cache together. The two paths alternate call by call, so a
load change on the (shared) machine hits both alike. Prints median microseconds per call and old /
new (``> 1``: the groups are faster), and the repack time.
``--shape 8b``: an 8B Llama's layers instead, at one row, in GB/s (``gguf_repack_8b``).

    python -m benchmarks.kernels.gguf_repack [--format q4_0|q4_1|q4_k|q6_k] [--batches 1,2,4,8,16,32]
        [--threads 2] [--iters 40]
    python -m benchmarks.kernels.gguf_repack --shape 8b [--threads 2] [--iters 40]
"""

from __future__ import annotations

import argparse
import statistics
import time

import radixlm._env  # noqa: F401  (thread policy before torch)  # isort: skip
import torch

from benchmarks.kernels.gguf_repack_8b import run_8b
from radixlm.kernels.cpu import gguf_blocks
from radixlm.kernels.cpu.build import load_gguf_kernels

# (name, out_features, in_features): a ~1.5B Llama (hidden 2048, intermediate 8192)
SHAPES = [("attn 2048x2048", 2048, 2048), ("up 8192x2048", 8192, 2048), ("down 2048x8192", 2048, 8192)]
Q4_0 = gguf_blocks.GGML_TYPES["q4_0"]
CACHE_BYTES = 64 << 20  # copies of a weight together exceed this (the L3 and then some)


def random_q4_0(n: int, k: int, gen: torch.Generator) -> torch.Tensor:
    blocks = torch.randint(0, 256, (n, gguf_blocks.row_bytes("q4_0", k)), dtype=torch.uint8, generator=gen)
    view = blocks.view(n, k // 32, 18)
    view[..., :2] = ((torch.rand(n, k // 32, 1, generator=gen) - 0.5) * 0.1).half().view(torch.uint8)
    return blocks


def random_q4_1(n: int, k: int, gen: torch.Generator) -> torch.Tensor:
    """Random Q4_1 blocks: any nibbles, fp16 d and m in +-0.05."""
    blocks = torch.randint(0, 256, (n, gguf_blocks.row_bytes("q4_1", k)), dtype=torch.uint8, generator=gen)
    view = blocks.view(n, k // 32, 20)
    view[..., :4] = ((torch.rand(n, k // 32, 2, generator=gen) - 0.5) * 0.1).half().view(torch.uint8)
    return blocks


def random_kquant(fmt: str, n: int, k: int, gen: torch.Generator) -> torch.Tensor:
    """Random Q4_K/Q6_K super-blocks: any quants, scales and minimums, fp16 d (and dmin) in 0..0.02."""
    size = gguf_blocks.BLOCK_BYTES[fmt]
    blocks = torch.randint(0, 256, (n, gguf_blocks.row_bytes(fmt, k)), dtype=torch.uint8, generator=gen)
    view = blocks.view(n, k // 256, size)
    halves = (torch.rand(n, k // 256, 2, generator=gen) * 0.02).half().view(torch.uint8)
    if fmt == "q4_k":
        view[..., 0:4] = halves
    else:
        view[..., 208:210] = halves[..., 0:2]
    return blocks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", default="1,2,4,8,16,32")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--iters", type=int, default=40)
    parser.add_argument("--shape", choices=["1.5b", "8b"], default="1.5b")
    parser.add_argument("--format", choices=["q4_0", "q4_1", "q4_k", "q6_k"], default="q4_0")
    args = parser.parse_args()
    fmt, ggml_type = args.format, gguf_blocks.GGML_TYPES[args.format]
    kernels = load_gguf_kernels()
    assert kernels is not None, "the gguf_linear kernels did not build"
    if args.shape == "8b":
        run_8b(kernels, random_q4_0, args.threads, args.iters, torch.Generator().manual_seed(0))
        return
    batches = [int(b) for b in args.batches.split(",")]
    gen = torch.Generator().manual_seed(0)
    print(f"{fmt}, isa {kernels.isa}, threads {args.threads}, iters {args.iters} (median us per call)")
    print(f"{'shape':>16} {'m':>3} {'old us':>9} {'new us':>9} {'old/new':>8}")
    for name, n, k in SHAPES:
        makers = {"q4_0": random_q4_0, "q4_1": random_q4_1}
        make = makers.get(fmt, lambda n, k, gen: random_kquant(fmt, n, k, gen))
        first = make(n, k, gen)
        copies = max(2, CACHE_BYTES // first.numel() + 1)
        weights = [first] + [make(n, k, gen) for _ in range(copies - 1)]
        start = time.perf_counter()
        new = [kernels.bind(w, ggml_type, k, repack=True) for w in weights]
        repack_ms = (time.perf_counter() - start) * 1e3 / copies
        old = [kernels.bind(w, ggml_type, k, repack=False) for w in weights]
        for m in batches:
            x = torch.randn(m, k, generator=gen)
            times: dict[str, list[float]] = {"old": [], "new": []}
            for it in range(args.iters + 3):
                for label, products in (("old", old), ("new", new)):
                    product = products[it % copies]
                    t0 = time.perf_counter()
                    product(x, args.threads)
                    if it >= 3:  # warm-up
                        times[label].append(time.perf_counter() - t0)
            o, w = statistics.median(times["old"]) * 1e6, statistics.median(times["new"]) * 1e6
            print(f"{name:>16} {m:>3} {o:>9.0f} {w:>9.0f} {o / w:>8.2f}")
        print(f"{name:>16} repack {repack_ms:.1f} ms per weight ({first.numel() / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
