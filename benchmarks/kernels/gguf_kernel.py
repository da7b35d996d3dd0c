"""The GGUF CPU kernel per layer shape against fp32 ``F.linear``, at small batches, in one run.

Shapes: SmolLM2-135M's layers (fused qkv, o, fused gate_up, down, the tied Q8_0 LM head) and a
Llama-1B-sized 2048 -> 8192 layer in Q4_0 and in the K-quants Q4_K and Q6_K (the formats of a Q4_K_M
file), and SmolLM2's gate_up in Q5_0 (llama.cpp's Q4_K_M fallback for its 576-wide rows, which are
not whole 256-weight super-blocks). For each shape and batch: microseconds per call (median), the
kernel's effective weight bandwidth (block bytes / time) and the ratio to fp32 (``> 1``: the kernel
is faster). The roofline at batch 1 is block bytes / memory bandwidth (~25 GB/s on the 2-core EPYC;
``../shared/FACTS.md``), so GB/s near that is the goal and far below it means overhead. Every call
reads its weight from memory (calls cycle through copies larger than the L3 cache together), as a
decode step does: SmolLM2's 30 layers are ~66 MB of Q4_1 blocks, twice the L3.

    python -m benchmarks.kernels.gguf_kernel [--batches 1,4,16] [--threads 2] [--iters 200] [--shapes 1b]
"""

from __future__ import annotations

import argparse
import functools
import itertools
import statistics
import time
from collections.abc import Callable, Iterator

import radixlm._env  # noqa: F401  (thread policy before torch)  # isort: skip
import torch
import torch.nn.functional as F

from radixlm.kernels.cpu import gguf_blocks
from radixlm.kernels.cpu.build import load_gguf_kernels

# (name, out_features, in_features, format)
SHAPES = [
    ("smollm2 qkv", 960, 576, "q4_1"),
    ("smollm2 o", 576, 576, "q4_1"),
    ("smollm2 gate_up", 3072, 576, "q4_1"),
    ("smollm2 down", 576, 1536, "q4_1"),
    ("smollm2 head", 49152, 576, "q8_0"),
    ("1b up", 8192, 2048, "q4_0"),
    ("gate_up q5_0", 3072, 576, "q5_0"),  # SmolLM2's gate_up in a llama.cpp Q4_K_M file
    ("1b up q4_k", 8192, 2048, "q4_k"),
    ("1b up q6_k", 8192, 2048, "q6_k"),
]


COLD_BYTES = 96 << 20  # more than the L3 cache: each call reads its weight from memory, as in a model


def copies(tensor: torch.Tensor) -> list[torch.Tensor]:
    """Enough copies of ``tensor`` that cycling through them never hits a warm cache."""
    return [tensor] + [tensor.clone() for _ in range(COLD_BYTES // (tensor.numel() * tensor.element_size()))]


def median_us(calls: Iterator[Callable[[], object]], iters: int) -> float:
    """Median microseconds of the calls ``calls`` yields (the first few are a warm-up)."""
    for _ in range(max(3, iters // 20)):
        next(calls)()
    times = []
    for _ in range(iters):
        fn = next(calls)
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e6 * statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batches", default="1,4,16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument(
        "--shapes", default="", help="only the shapes whose name contains one of these (comma-separated)"
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    kernels = load_gguf_kernels()
    if kernels is None:
        raise SystemExit("the GGUF kernels are unavailable here")
    gen = torch.Generator().manual_seed(0)
    print(f"{'shape':16s} {'batch':>5s} {'kernel us':>10s} {'GB/s':>6s} {'fp32 us':>9s} {'fp32/kernel':>11s}")
    totals = {}
    wanted = [w for w in args.shapes.split(",") if w]
    for name, n, k, fmt in SHAPES:
        if wanted and not any(w in name for w in wanted):
            continue
        weight = torch.randn(n, k, generator=gen) * 0.02
        blocks = gguf_blocks.quantize(weight, fmt)
        ggml_type = gguf_blocks.GGML_TYPES[fmt]
        block_copies, weight_copies = copies(blocks), copies(weight)
        for bs in (int(b) for b in args.batches.split(",")):
            x = torch.randn(bs, k, generator=gen)
            ours_calls = [functools.partial(kernels.gguf_linear, x, b, ggml_type) for b in block_copies]
            ref_calls = [functools.partial(F.linear, x, w) for w in weight_copies]
            with torch.inference_mode():
                ours = median_us(itertools.cycle(ours_calls), args.iters)
                ref = median_us(itertools.cycle(ref_calls), args.iters)
            gbs = blocks.numel() / ours / 1e3
            if name.startswith("smollm2"):
                totals.setdefault(bs, [0.0, 0.0])
                mult = 1 if name.endswith("head") else 30
                totals[bs][0] += mult * ours
                totals[bs][1] += mult * ref
            print(f"{name:16s} {bs:5d} {ours:10.1f} {gbs:6.1f} {ref:9.1f} {ref / ours:11.2f}", flush=True)
    for bs, (ours, ref) in totals.items():
        print(
            f"smollm2 step's matmuls at batch {bs}: kernel {ours / 1e3:.2f} ms, fp32 {ref / 1e3:.2f} ms "
            f"({ref / ours:.2f}x)"
        )


if __name__ == "__main__":
    main()
