"""The scheduler's running totals and its recent generation throughput."""

from __future__ import annotations

import time
from collections import deque


class StepCounters:
    """Totals since start-up (requests, steps, prefill and generated tokens, retractions) and the
    generated tokens per second over the last ``window`` sampling steps."""

    def __init__(self, window: int = 64) -> None:
        self.num_requests = 0
        self.num_steps = 0
        self.num_prefill_tokens = 0
        self.num_generated_tokens = 0
        self.num_retractions = 0
        self._recent: deque[tuple[float, int]] = deque(maxlen=window)

    def on_generated(self, num_tokens: int) -> None:
        self.num_generated_tokens += num_tokens
        self._recent.append((time.monotonic(), num_tokens))

    def gen_throughput(self) -> float:
        """Tokens per second between the oldest and the newest sampling step of the window."""
        recent = list(self._recent)
        if len(recent) < 2 or recent[-1][0] <= recent[0][0]:
            return 0.0
        return sum(n for _, n in recent[1:]) / (recent[-1][0] - recent[0][0])

    def as_dict(self) -> dict[str, int]:
        return {
            "num_generated_tokens": self.num_generated_tokens,
            "num_prefill_tokens": self.num_prefill_tokens,
            "num_retractions": self.num_retractions,
            "num_requests": self.num_requests,
            "num_steps": self.num_steps,
        }
