"""One-row (decode) GGUF products with work items of different sizes, in one process.

A product's weight rows are shared out between the threads in work items (``chunk_rows`` in
``cpu/gguf_format.h``). Over several passes of activation rows an item stays small (256 KB) so
that it stays in L2 between the passes; in one pass nothing is read twice, and this compares item
sizes there: an 8B Llama's layers (q/k/v and gate/up joined, as the model binds them) and its LM
head's shape in Q6_K, repacked in groups as served. Each call reads its weight from memory (a
random one of copies four times the L3 cache's size, never the one just read) and the sizes take
turns in a fresh random order each round, so a change in the shared machine's load hits them
alike. Prints GB/s of weight read (median) per size, and each against the first.

    python -m benchmarks.kernels.gguf_chunks [--sizes-kb 256,1024,2048,4096] [--threads 2] [--calls 30]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import radixlm._env  # noqa: F401  (thread policy before torch)  # isort: skip
import torch

from benchmarks.kernels.gguf_repack import CACHE_BYTES, random_kquant, random_q4_0
from radixlm.kernels.cpu import gguf_blocks
from radixlm.kernels.cpu.build import load_gguf_kernels

# (name, format, out_features, in_features)
SHAPES = [
    ("qkv 6144x4096", "q4_0", 6144, 4096),
    ("o 4096x4096", "q4_0", 4096, 4096),
    ("gate_up 28672x4096", "q4_0", 28672, 4096),
    ("down 4096x14336", "q4_0", 4096, 14336),
    ("head 128256x4096", "q6_k", 128256, 4096),
]


def random_blocks(fmt: str, n: int, k: int, gen: torch.Generator) -> torch.Tensor:
    return random_q4_0(n, k, gen) if fmt == "q4_0" else random_kquant(fmt, n, k, gen)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes-kb", default="256,1024,2048,4096")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--calls", type=int, default=30, help="calls per size and shape")
    args = ap.parse_args()
    sizes = [int(s) << 10 for s in args.sizes_kb.split(",")]
    kernels, gen = load_gguf_kernels(), torch.Generator().manual_seed(0)
    print(f"threads {args.threads}, ISA {kernels.isa}; GB/s of weight read, median of {args.calls} calls")
    print(f"{'shape':>19} " + " ".join(f"{s >> 10:>7}K" for s in sizes) + "   (ratio to the first)")
    for name, fmt, n, k in SHAPES:
        nbytes = n * gguf_blocks.row_bytes(fmt, k)
        copies = max(4, 4 * CACHE_BYTES // nbytes + 1)
        bound = [
            kernels.bind(random_blocks(fmt, n, k, gen), gguf_blocks.GGML_TYPES[fmt], k) for _ in range(copies)
        ]
        x = torch.randn(1, k)
        times: dict[int, list[float]] = {s: [] for s in sizes}
        order, last = random.Random(0), 0
        for _ in range(args.calls + 2):
            for size in order.sample(sizes, len(sizes)):  # a fresh order each round
                last = (last + order.randrange(1, copies)) % copies  # any copy but the one just read
                weight = bound[last]
                with kernels.one_pass_chunk_bytes(size):
                    t0 = time.perf_counter()
                    weight(x, args.threads)
                    times[size].append(time.perf_counter() - t0)
        gbs = [nbytes / statistics.median(times[s][2:]) / 1e9 for s in sizes]
        cells = " ".join(f"{g:>8.1f}" for g in gbs)
        print(f"{name:>19} {cells}   ({' '.join(f'{g / gbs[0]:.2f}' for g in gbs)})", flush=True)
        del bound


if __name__ == "__main__":
    main()
