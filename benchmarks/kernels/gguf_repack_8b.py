"""The ``--shape 8b`` part of ``benchmarks.kernels.gguf_repack``: an 8B Llama's Q4_0 layers (q/k/v and
gate/up joined as the model binds them), at one activation row.

Per shape, in one process (ratios only: the machine is shared):
- repack: GB/s of file blocks repacked into fresh memory, against ``fault+fill`` (a fresh torch
  buffer of the packed size faulted in and filled: the kernel's page zeroing plus one write pass,
  the floor of any copy into new memory); each alternated with the other;
- m=1 product: GB/s of the packed bytes read, from the repack's buffer (2 MB pages) and from a copy
  on 4 KB pages (MADV_NOHUGEPAGE before first touch), against ``read_bytes`` (a pure read in the
  product's chunks and threads) on the same huge-page buffer and a torch copy of 256 MB.
``huge MB``: AnonHugePages of the repacked buffer's mapping (/proc/self/smaps).
"""

from __future__ import annotations

import ctypes
import itertools
import statistics
import time
from collections.abc import Callable

import torch

from radixlm.kernels.cpu.gguf_ops import GGUFKernels

# (name, out_features, in_features)
SHAPES_8B = [
    ("qkv 6144x4096", 6144, 4096),
    ("o 4096x4096", 4096, 4096),
    ("gate_up 28672x4096", 28672, 4096),
    ("down 4096x14336", 4096, 14336),
]
_MADV_NOHUGEPAGE = 15
Q4_0 = 2
_libc = ctypes.CDLL(None, use_errno=True)


def huge_page_mb(t: torch.Tensor) -> float:
    """AnonHugePages (MB) of the mapping that holds ``t``'s first byte."""
    addr, inside = t.data_ptr(), False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(v, 16) for v in head.split("-"))
                inside = lo <= addr < hi
            elif inside and head == "AnonHugePages:":
                return int(line.split()[1]) / 1024
    return 0.0


def small_page_copy(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t`` on 4 KB pages (torch's allocator starts large buffers on 2 MB boundaries)."""
    out = torch.empty_like(t)
    start, size = ctypes.c_void_p(out.data_ptr() & ~4095), ctypes.c_size_t(out.numel() + 4096)
    _libc.madvise(start, size, _MADV_NOHUGEPAGE)
    return out.copy_(t)


def median_s(fn: Callable[[], object], iters: int) -> float:
    times = []
    for it in range(iters + 2):
        t0 = time.perf_counter()
        fn()
        if it >= 2:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def cycled(fn: Callable[[torch.Tensor], object], weights: list[torch.Tensor]) -> Callable[[], object]:
    """``fn`` on the next of ``weights`` at each call (so each reads its weight from memory)."""
    it = itertools.cycle(weights)
    return lambda: fn(next(it))


def measure_shape(
    kernels: GGUFKernels, blocks: list[torch.Tensor], n: int, k: int, threads: int, iters: int
) -> str:
    """One table row: repack and fault+fill GB/s, m=1 GB/s on 2 MB and 4 KB pages and read_bytes."""
    compiled, packed_bytes = kernels._compiled, (n + 7) // 8 * (k // 32) * 144
    rep, fill = [], []
    for it in range(4):
        t0 = time.perf_counter()
        compiled.repack_groups(blocks[it % len(blocks)], Q4_0, threads)
        rep.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        torch.empty(packed_bytes, dtype=torch.uint8).fill_(0)
        fill.append(time.perf_counter() - t0)
    huge = [kernels.bind(b, Q4_0, k, repack=True).weight for b in blocks]
    small = [small_page_copy(w) for w in huge]
    x = torch.randn(1, k)
    product = cycled(lambda w: compiled.gguf_linear_groups(x, w, Q4_0, n, threads), huge)
    product_small = cycled(lambda w: compiled.gguf_linear_groups(x, w, Q4_0, n, threads), small)
    t_huge, t_small = [], []
    for _ in range(3):  # alternate the two page sizes
        t_huge.append(median_s(product, iters // 3 + 1))
        t_small.append(median_s(product_small, iters // 3 + 1))
    t_read = median_s(cycled(lambda w: kernels.read_bytes(w, threads), huge), iters // 3 + 1)
    gb, r, f = packed_bytes / 1e9, statistics.median(rep), statistics.median(fill)
    return (
        f"{packed_bytes / 1e6:>5.0f} {gb / r:>7.2f} {gb / f:>6.2f} {f / r:>6.2f} | "
        f"{gb / min(t_huge):>8.1f} {gb / min(t_small):>6.1f} {gb / t_read:>6.1f}"
        f"  (huge MB {huge_page_mb(huge[0]):.0f})"
    )


def run_8b(
    kernels: GGUFKernels,
    random_q4_0: Callable[[int, int, torch.Generator], torch.Tensor],
    threads: int,
    iters: int,
    gen: torch.Generator,
    cache_bytes: int = 64 << 20,
) -> None:
    big, dst = torch.ones(256 << 20, dtype=torch.uint8), torch.zeros(256 << 20, dtype=torch.uint8)
    copy_gbs = big.numel() / median_s(lambda: dst.copy_(big), 5) / 1e9
    print(f"threads {threads}; torch copy of 256 MB {copy_gbs:.1f} GB/s (bytes copied, a pre-faulted buffer)")
    head = f"{'MB':>5} {'repack':>7} {'fill':>6} {'ratio':>6} | {'m=1 2MB':>8} {'4KB':>6} {'read':>6}"
    print(f"{'shape':>19} {head}  GB/s")
    for name, n, k in SHAPES_8B:
        copies = max(2, cache_bytes // (n * k // 32 * 18) + 1)  # together past the L3
        blocks = [random_q4_0(n, k, gen) for _ in range(copies)]
        print(f"{name:>19} {measure_shape(kernels, blocks, n, k, threads, iters)}", flush=True)
