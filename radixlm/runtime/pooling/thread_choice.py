"""How many CPU threads an encoder forward of a given size runs on, chosen by measured speed.

A small forward (a few dozen tokens) is a hundred short products and norms; with torch's OpenMP team
each of torch's ops waits at a barrier for its second thread, and on a shared machine that thread is
often off the core: on the shared 2-core box a batch-1 MiniLM forward took 10-20 ms on one thread and
80-250 ms on two (benchmarks/log/embeddings.md). Our product kernels split their work without such
a barrier, so on a quiet machine the best batch-1 plan is products on two threads and torch's ops on
one (7.35 ms a request, against 9.4 all on two and 10.4 all on one). So no plan is right everywhere:
``ThreadChoice`` times each plan (products' threads, torch's threads) per size class (powers of two
of the token count) and runs each forward on the fastest, trying a slower one again now and then
(after ``EXPLORE_EVERY`` times their cost ratio forwards of that class) so a change of load is
noticed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import torch

from radixlm.kernels.linear import PANEL_MAX_ROWS
from radixlm.kernels.product_threads import product_threads

T = TypeVar("T")
EXPLORE_EVERY = 32  # 16 cost up to 6% of a loaded box's batch-1 time (benchmarks/log/embeddings.md)
SMOOTHING = 0.3  # weight of the newest timing in the running cost

Plan = tuple[int, int]  # (threads of our product kernels, torch's threads)


class ThreadChoice:
    """Per size class, the running seconds per token of each plan, and the forwards since each was
    last run."""

    def __init__(self, threads: int) -> None:
        n = max(int(threads), 1)
        self.options: list[Plan] = [(1, 1)] if n == 1 else [(1, 1), (n, 1), (n, n)]
        self.cost: dict[tuple[int, Plan], float] = {}
        self.calls: dict[tuple[int, Plan], int] = {}

    def plans(self, size: int) -> list[Plan]:
        """The plans worth timing in size class ``size``: products on more threads than torch's ops
        only where our kernels take every product (up to ``PANEL_MAX_ROWS`` tokens; above, oneDNN's
        products follow torch's count, so that plan is all on one thread again)."""
        if (1 << size) - 1 <= PANEL_MAX_ROWS:
            return self.options
        return [p for p in self.options if p[0] == p[1]]

    def run(self, tokens: int, fn: Callable[[], T]) -> T:
        """``fn()`` on the plan chosen for ``tokens`` tokens; torch's thread count is restored."""
        if len(self.options) == 1:
            return fn()
        size = max(int(tokens), 1).bit_length()
        plan = self._pick(size)
        before = torch.get_num_threads()
        torch.set_num_threads(plan[1])
        start = time.perf_counter()
        try:
            with product_threads(plan[0]):
                return fn()
        finally:
            per_token = (time.perf_counter() - start) / max(tokens, 1)
            torch.set_num_threads(before)
            key = (size, plan)
            old = self.cost.get(key)
            self.cost[key] = per_token if old is None else (1 - SMOOTHING) * old + SMOOTHING * per_token

    def _pick(self, size: int) -> Plan:
        plans = self.plans(size)
        untried = [p for p in plans if (size, p) not in self.cost]
        if untried:
            return untried[0]
        fast = min(plans, key=lambda p: self.cost[(size, p)])
        # NOTE: a slower plan is retried after EXPLORE_EVERY x (its cost / the fastest's) forwards, so
        # retrying costs at most about 1/EXPLORE_EVERY of the time per plan however far apart they are
        due = []
        for plan in plans:
            if plan != fast:
                key = (size, plan)
                self.calls[key] = self.calls.get(key, 0) + 1
                if self.calls[key] >= EXPLORE_EVERY * self.cost[key] / max(self.cost[(size, fast)], 1e-12):
                    due.append(plan)
        if due:
            self.calls[(size, due[0])] = 0
            return due[0]
        return fast
