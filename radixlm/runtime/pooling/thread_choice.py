"""How many CPU threads an encoder forward of a given size runs on, chosen by measured speed.

A small forward (a few dozen tokens) is a hundred short products and norms; with torch's OpenMP team
each one waits at a barrier for its second thread, and on a shared machine that thread is often off
the core: on the shared 2-core box a batch-1 MiniLM forward took 10-20 ms on one thread and 80-250
ms on two (benchmarks/log/embeddings.md). On an idle machine two threads win. So neither count is
right everywhere: ``ThreadChoice`` times both per size class (powers of two of the token count) and
runs each forward on the faster, trying the other again now and then (after ``EXPLORE_EVERY`` times
their cost ratio forwards of that class) so a change of load is noticed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import torch

T = TypeVar("T")
EXPLORE_EVERY = 32  # 16 cost up to 6% of a loaded box's batch-1 time (benchmarks/log/embeddings.md)
SMOOTHING = 0.3  # weight of the newest timing in the running cost


class ThreadChoice:
    """Per size class, the running seconds per token of one thread and of ``threads``, and the forwards
    since the slower count was last tried."""

    def __init__(self, threads: int) -> None:
        self.options = sorted({1, max(int(threads), 1)})
        self.cost: dict[tuple[int, int], float] = {}
        self.calls: dict[int, int] = {}

    def run(self, tokens: int, fn: Callable[[], T]) -> T:
        """``fn()`` on the thread count chosen for ``tokens`` tokens; the CPU's count is restored."""
        if len(self.options) == 1:
            return fn()
        size = max(int(tokens), 1).bit_length()
        threads = self._pick(size)
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        start = time.perf_counter()
        try:
            return fn()
        finally:
            per_token = (time.perf_counter() - start) / max(tokens, 1)
            torch.set_num_threads(before)
            key = (size, threads)
            old = self.cost.get(key)
            self.cost[key] = per_token if old is None else (1 - SMOOTHING) * old + SMOOTHING * per_token

    def _pick(self, size: int) -> int:
        untried = [n for n in self.options if (size, n) not in self.cost]
        if untried:
            return untried[0]
        fast, slow = sorted(self.options, key=lambda n: self.cost[(size, n)])
        # NOTE: the slower count is retried after EXPLORE_EVERY x (its cost / the faster's) forwards,
        # so retrying costs at most about 1/EXPLORE_EVERY of the time however far apart they are
        gap = self.cost[(size, slow)] / max(self.cost[(size, fast)], 1e-12)
        self.calls[size] = self.calls.get(size, 0) + 1
        if self.calls[size] >= EXPLORE_EVERY * gap:
            self.calls[size] = 0
            return slow
        return fast
