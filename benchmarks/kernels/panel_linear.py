"""The panel product (``kernels/cpu/panel_linear.cpp``) against the small-batch kernel, oneDNN's
packed product and torch's ``F.linear`` on all-MiniLM-L6-v2's shapes (qkv 1152x384, 384x384,
1536x384, 384x1536) at 1-256 rows, on one thread and on ``--threads``; the four alternate call by
call in one process. Minimum and median microseconds of a call (weights hot in cache).

    python -m benchmarks.kernels.panel_linear [--threads 2] [--reps 40]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import radixlm._env  # noqa: F401  (thread policy, huge pages, before torch)  # isort: skip
import torch
import torch.nn.functional as F

from radixlm.kernels.cpu.build import load_decode_kernels
from radixlm.kernels.linear import pack_panels
from radixlm.runtime.layers.packed_weights import pack_weight

SHAPES = [(1152, 384), (384, 384), (1536, 384), (384, 1536)]  # MiniLM: qkv, o, up, down
ROWS = [1, 8, 12, 24, 32, 64, 128, 256]
NAMES = ["F.linear", "oneDNN packed", "small_batch", "panel"]


def timings(fns: list[Callable[[], object]], reps: int) -> list[tuple[float, float]]:
    """(min, median) us of each of ``fns``, the calls alternating."""
    times: list[list[float]] = [[] for _ in fns]
    for fn in fns:
        fn()
    for _ in range(reps):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            fn()
            times[i].append((time.perf_counter() - start) * 1e6)
    return [(min(t), sorted(t)[len(t) // 2]) for t in times]


def candidates(kernels, x, w, b, packed, panels, threads: int) -> list[Callable[[], object]]:
    """The four products of ``x @ w^T + b`` (``NAMES``)."""
    return [
        lambda: F.linear(x, w, b),
        lambda: torch.ops.mkldnn._linear_pointwise(x, packed, b, "none", [], ""),
        lambda: kernels.small_batch_linear(x, w, b, threads),
        lambda: kernels.panel_linear(x, panels, w.shape[0], b, threads),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=40)
    args = parser.parse_args()
    kernels = load_decode_kernels()
    assert kernels is not None, "the CPU kernels did not build"
    for threads in sorted({1, args.threads}):
        torch.set_num_threads(threads)
        print(f"threads {threads}: min/median us of {', '.join(NAMES)}; panel GFLOP/s (min)")
        for n, k in SHAPES:
            w, b = torch.randn(n, k), torch.randn(n)
            packed, panels = pack_weight(w), pack_panels(w)
            for rows in ROWS:
                x = torch.randn(rows, k)
                got = timings(candidates(kernels, x, w, b, packed, panels, threads), args.reps)
                cells = "  ".join(f"{lo:7.1f}/{mid:7.1f}" for lo, mid in got)
                print(f"{n:5d}x{k:<5d}{rows:4d}: {cells}   {2 * rows * n * k / got[3][0] / 1e3:5.0f}")


if __name__ == "__main__":
    main()
