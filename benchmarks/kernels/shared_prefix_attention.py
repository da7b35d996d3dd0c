"""Attention over a prefix the whole batch shares, on SmolLM2-135M's heads (9 query, 3 kv, 64 dims),
fp32, a random pool; each pair runs alternated, nine rounds of ten calls, and the tables give medians.

Decode: the in-place C++ kernel alone against the cascade (the prefix through torch's flash kernel
once for all queries, the private suffixes read in place and merged by the kernel). The ratio is
what ``MIN_SHARED_READS_IN_PLACE`` in ``radixlm/runtime/attention/torch_backend.py`` is set from.

Extend (63 requests of 13-15 new tokens after a shared prefix, as ``engine_throughput.py``'s): the
cascade with the private keys in padded torch batches against the private keys read in place.

    python -m benchmarks.kernels.shared_prefix_attention
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import radixlm._env  # noqa: F401  (thread policy before torch)  # isort: skip
import torch

from radixlm.kernels.cpu.build import load_decode_kernels
from radixlm.kernels.shared_prefix_attention import (
    TokenQueries,
    decode_attention_shared_prefix_torch,
    extend_attention_shared_prefix_torch,
)
from radixlm.runtime.attention.torch_backend import MIN_SHARED_READS_IN_PLACE

HEADS_Q, HEADS_KV, HEAD_DIM, POOL_SLOTS = 9, 3, 64, 200_000
SHAPES = [(64, 301, 40), (32, 301, 40), (64, 100, 40), (16, 1000, 40), (8, 1000, 40), (64, 1000, 100)]
EXTEND_SHAPES = [(63, 301), (8, 1000)]  # requests, shared keys


def _calls(kernels, bs: int, shared: int, private: int) -> tuple[Callable[[], object], Callable[[], object]]:
    gen = torch.Generator().manual_seed(bs * 7 + shared)
    k = torch.randn(POOL_SLOTS, HEADS_KV, HEAD_DIM, generator=gen)
    v = torch.randn(POOL_SLOTS, HEADS_KV, HEAD_DIM, generator=gen)
    q = torch.randn(bs, HEADS_Q, HEAD_DIM, generator=gen)
    slots = torch.randperm(POOL_SLOTS, generator=gen)
    table = torch.zeros(bs, shared + private + 1, dtype=torch.int64)
    table[:, :shared] = slots[:shared]
    table[:, shared : shared + private] = slots[shared : shared + bs * private].view(bs, private)
    rows, lens = torch.arange(bs), torch.full((bs,), shared + private)
    lens_cpu = lens.tolist()
    scale = HEAD_DIM**-0.5

    def in_place() -> object:
        return kernels.paged_decode_attention(q, k, v, table, rows, lens, lens_cpu, scale)

    def cascade() -> object:
        return decode_attention_shared_prefix_torch(
            q, k, v, table, rows, lens, scale, shared, shared + private, kernels, lens_cpu
        )

    return in_place, cascade


def _extend_calls(kernels, bs: int, shared: int) -> tuple[Callable[[], object], Callable[[], object], int]:
    gen = torch.Generator().manual_seed(bs + shared)
    new_tokens = [13 + i % 3 for i in range(bs)]
    k = torch.randn(POOL_SLOTS, HEADS_KV, HEAD_DIM, generator=gen)
    v = torch.randn(POOL_SLOTS, HEADS_KV, HEAD_DIM, generator=gen)
    q = torch.randn(sum(new_tokens), HEADS_Q, HEAD_DIM, generator=gen)
    slots = torch.randperm(POOL_SLOTS, generator=gen)
    table = torch.zeros(bs, shared + max(new_tokens) + 1, dtype=torch.int64)
    table[:, :shared] = slots[:shared]
    used = shared
    for row, n in enumerate(new_tokens):
        table[row, shared : shared + n] = slots[used : used + n]
        used += n
    rows, prefix_lens = torch.arange(bs), [shared] * bs
    token_queries = TokenQueries.of(rows, prefix_lens, new_tokens)
    scale = HEAD_DIM**-0.5

    args = (q, k, v, table, rows, prefix_lens, new_tokens, scale, shared)

    def padded() -> object:
        return extend_attention_shared_prefix_torch(*args)

    def in_place() -> object:
        return extend_attention_shared_prefix_torch(*args, kernels, token_queries)

    return padded, in_place, sum(new_tokens)


def _alternated(
    first: Callable[[], object], second: Callable[[], object], rounds: int, calls: int
) -> tuple[float, float]:
    """Median microseconds a call of each, the two run in turn."""
    first(), second()
    times: list[list[float]] = [[], []]
    for _ in range(rounds):
        for i, fn in enumerate((first, second)):
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            times[i].append((time.perf_counter() - start) / calls)
    return statistics.median(times[0]) * 1e6, statistics.median(times[1]) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--calls", type=int, default=10)
    args = ap.parse_args()
    kernels = load_decode_kernels()
    if kernels is None:
        raise SystemExit("the CPU decode kernels cannot be built here")
    print(
        "| batch | shared keys | private keys | shared reads | in-place us | cascade us | in-place/cascade "
        "| backend takes |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---|")
    for bs, shared, private in SHAPES:
        a, b = _alternated(*_calls(kernels, bs, shared, private), args.rounds, args.calls)
        takes = "cascade" if shared * bs >= MIN_SHARED_READS_IN_PLACE else "in-place"
        print(
            f"| {bs} | {shared} | {private} | {shared * bs} | {a:.0f} | {b:.0f} | {a / b:.2f} | {takes} |",
            flush=True,
        )
    print()
    print(
        "| extend: requests | new tokens | shared keys | private keys padded, us | read in place, us "
        "| ratio |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for bs, shared in EXTEND_SHAPES:
        padded, in_place, tokens = _extend_calls(kernels, bs, shared)
        a, b = _alternated(padded, in_place, args.rounds, max(1, args.calls // 2))
        print(f"| {bs} | {tokens} | {shared} | {a:.0f} | {b:.0f} | {a / b:.2f} |", flush=True)


if __name__ == "__main__":
    main()
