"""The GGUF kernel's AVX-512 VNNI loops against its AVX2 ones, and both against a pure read of the
weight, per layer shape and batch, in one process.

For each shape and batch: the bandwidth of a pure read of its blocks (``read_bytes``: the same
chunks and threads as a matrix-vector product, no arithmetic), the microseconds per call of each
instruction set (``use_isa``; the read and the two products alternate), the matrix-vector product's share of
the read's bandwidth (near 100%: bandwidth-bound; far below: compute- or latency-bound) and the
ratio avx2 / vnni (``> 1``: VNNI faster). Weights are read from memory on every call (calls cycle
through copies larger than the L3 cache), as in a decode step. Shapes: the random 8B Llama file's
layers (fused qkv, o, fused gate_up, down, all Q4_0) and the 1.5B file's, and a 2048 -> 8192 layer
in each other format. Both paths' outputs are checked bit-identical on the way. ``--grouped``: the
weights repacked in groups of eight rows as served (Q4_0, Q4_1, Q4_K, Q6_K; the others as they are),
the read over the repacked bytes.

    python -m benchmarks.kernels.gguf_isa [--batches 1,4,32] [--threads 2] [--iters 40] [--shapes 8b]
    python -m benchmarks.kernels.gguf_isa --grouped --shapes 1b --batches 1,4,32,128
"""

from __future__ import annotations

import argparse
import functools
import itertools
import statistics
import time
from collections.abc import Callable

import radixlm._env  # noqa: F401  (thread policy before torch)  # isort: skip
import torch

from benchmarks.kernels.gguf_kernel import copies
from radixlm.kernels.cpu import gguf_blocks
from radixlm.kernels.cpu.build import load_gguf_kernels
from radixlm.kernels.cpu.gguf_ops import GGUFKernels

# (name, out_features, in_features, format)
SHAPES = [
    ("8b qkv", 6144, 4096, "q4_0"),
    ("8b o", 4096, 4096, "q4_0"),
    ("8b gate_up", 28672, 4096, "q4_0"),
    ("8b down", 4096, 14336, "q4_0"),
    ("1.5b qkv", 3072, 2048, "q4_0"),
    ("1.5b gate_up", 16384, 2048, "q4_0"),
    ("1.5b down", 2048, 8192, "q4_0"),
    ("1b up q4_1", 8192, 2048, "q4_1"),
    ("1b up q5_0", 8192, 2048, "q5_0"),
    ("1b up q8_0", 8192, 2048, "q8_0"),
    ("1b up q4_k", 8192, 2048, "q4_k"),
    ("1b up q6_k", 8192, 2048, "q6_k"),
]


def timed(fn: functools.partial) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def compare(
    kernels: GGUFKernels,
    products: list[Callable[[], torch.Tensor]],
    weights: list[torch.Tensor],
    iters: int,
    threads: int,
) -> dict[str, float]:
    """Median microseconds per call of a pure read, the AVX2 product and the VNNI one, alternating;
    each call on the next copy (``products[i]`` multiplies by ``weights[i]``)."""
    turn = itertools.cycle(range(len(products)))
    times: dict[str, list[float]] = {"read": [], "avx2": [], "avx512vnni": []}
    for it in range(iters + 3):
        for side, samples in times.items():
            i = next(turn)
            if side == "read":
                elapsed = timed(functools.partial(kernels.read_bytes, weights[i], threads))
            else:
                with kernels.use_isa(side):
                    elapsed = timed(products[i])
            if it >= 3:
                samples.append(elapsed)
    return {side: 1e6 * statistics.median(samples) for side, samples in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batches", default="1,4,32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument(
        "--shapes", default="", help="only shapes whose name contains one of these (comma-separated)"
    )
    ap.add_argument("--grouped", action="store_true", help="weights repacked in groups of eight, as served")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    kernels = load_gguf_kernels()
    if kernels is None:
        raise SystemExit("the GGUF kernels are unavailable here")
    if "avx512vnni" not in kernels.available_isas():
        raise SystemExit("this CPU lacks AVX-512 VNNI: only the AVX2 loops can run here")
    gen = torch.Generator().manual_seed(0)
    wanted = [w for w in args.shapes.split(",") if w]
    print(
        f"{'shape':14s} {'read GB/s':>9s} {'batch':>5s} {'avx2 us':>9s} {'vnni us':>9s} {'avx2/vnni':>9s} "
        f"{'avx2 %read':>10s} {'vnni %read':>10s}"
    )
    for name, n, k, fmt in SHAPES:
        if wanted and not any(w in name for w in wanted):
            continue
        blocks = copies(gguf_blocks.quantize(torch.randn(n, k, generator=gen) * 0.02, fmt))
        ggml_type = gguf_blocks.GGML_TYPES[fmt]
        bound = [kernels.bind(b, ggml_type, k, repack=args.grouped) for b in blocks]
        weights = [b.weight for b in bound]  # 2-D uint8: the file's rows, or the groups
        nbytes = weights[0].numel()
        for bs in (int(b) for b in args.batches.split(",")):
            x = torch.randn(bs, k, generator=gen)
            with kernels.use_isa("avx2"):
                ref = bound[0](x, args.threads)
            with kernels.use_isa("avx512vnni"):
                if not torch.equal(bound[0](x, args.threads), ref):
                    raise SystemExit(f"{name} batch {bs}: the two paths differ")
            products = [functools.partial(b, x, args.threads) for b in bound]
            us = compare(kernels, products, weights, args.iters, args.threads)
            read_us, avx2, vnni = us["read"], us["avx2"], us["avx512vnni"]
            print(
                f"{name:14s} {nbytes / read_us / 1e3:9.1f} {bs:5d} {avx2:9.1f} {vnni:9.1f} "
                f"{avx2 / vnni:9.2f} "
                f"{100 * read_us / avx2:9.0f}% {100 * read_us / vnni:9.0f}%",
                flush=True,
            )


if __name__ == "__main__":
    main()
