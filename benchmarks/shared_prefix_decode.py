"""Decode attention over a prefix the whole batch shares: the in-place C++ kernel alone against the
cascade (the prefix through torch's flash kernel once for all queries, the private suffixes read in
place and merged by the kernel). SmolLM2-135M's heads (9 query, 3 kv, 64 dims), fp32, random pool.

The two run alternated, nine rounds of ten calls each; the table gives the medians. The ratio is
what ``MIN_SHARED_READS_IN_PLACE`` in ``radixlm/runtime/attention/torch_backend.py`` is set from.

    python benchmarks/shared_prefix_decode.py
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import radixlm._env  # noqa: F401  (thread policy before torch)  # isort: skip
import torch

from radixlm.kernels.cpu.build import load_decode_kernels
from radixlm.kernels.shared_prefix_attention import decode_attention_shared_prefix_torch
from radixlm.runtime.attention.torch_backend import MIN_SHARED_READS_IN_PLACE

HEADS_Q, HEADS_KV, HEAD_DIM, POOL_SLOTS = 9, 3, 64, 200_000
SHAPES = [(64, 301, 40), (32, 301, 40), (64, 100, 40), (16, 1000, 40), (8, 1000, 40), (64, 1000, 100)]


def _calls(kernels, bs: int, shared: int, private: int) -> tuple[Callable[[], object], Callable[[], object]]:
    gen = torch.Generator().manual_seed(bs * 7 + shared)
    k = torch.randn(POOL_SLOTS, HEADS_KV, HEAD_DIM, generator=gen)
    v = torch.randn(POOL_SLOTS, HEADS_KV, HEAD_DIM, generator=gen)
    q = torch.randn(bs, HEADS_Q, HEAD_DIM, generator=gen)
    slots = torch.randperm(POOL_SLOTS, generator=gen)
    table = torch.zeros(bs, shared + private + 1, dtype=torch.int64)
    table[:, :shared] = slots[:shared]
    table[:, shared:shared + private] = slots[shared:shared + bs * private].view(bs, private)
    rows, lens = torch.arange(bs), torch.full((bs,), shared + private)
    lens_cpu = lens.tolist()
    scale = HEAD_DIM ** -0.5

    def in_place() -> object:
        return kernels.paged_decode_attention(q, k, v, table, rows, lens, lens_cpu, scale)

    def cascade() -> object:
        return decode_attention_shared_prefix_torch(q, k, v, table, rows, lens, scale, shared,
                                                    shared + private, kernels, lens_cpu)

    return in_place, cascade


def _median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--calls", type=int, default=10)
    args = ap.parse_args()
    kernels = load_decode_kernels()
    if kernels is None:
        raise SystemExit("the CPU decode kernels cannot be built here")
    print("| batch | shared keys | private keys | shared reads | in-place us | cascade us | in-place/cascade "
          "| backend takes |")
    print("|---:|---:|---:|---:|---:|---:|---:|---|")
    for bs, shared, private in SHAPES:
        in_place, cascade = _calls(kernels, bs, shared, private)
        in_place(), cascade()
        times: dict[str, list[float]] = {"in_place": [], "cascade": []}
        for _ in range(args.rounds):
            for name, fn in (("in_place", in_place), ("cascade", cascade)):
                start = time.perf_counter()
                for _ in range(args.calls):
                    fn()
                times[name].append((time.perf_counter() - start) / args.calls)
        a, b = _median_us(times["in_place"]), _median_us(times["cascade"])
        takes = "cascade" if shared * bs >= MIN_SHARED_READS_IN_PLACE else "in-place"
        print(f"| {bs} | {shared} | {private} | {shared * bs} | {a:.0f} | {b:.0f} | {a / b:.2f} | {takes} |",
              flush=True)


if __name__ == "__main__":
    main()
