"""Hit-rate and eviction counters shared by both prefix caches."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class CacheMetrics:
    """Cumulative counters since construction or the last ``reset``."""

    hit_tokens: int = 0
    requested_tokens: int = 0
    evicted_tokens: int = 0

    def record_match(self, requested: int, hit: int) -> None:
        self.requested_tokens += requested
        self.hit_tokens += hit

    def as_dict(self, num_nodes: int, cached_tokens: int) -> dict:
        """The ``stats()`` dict: counters, hit rate (0.0 before any request) and tree size."""
        return {
            "hit_tokens": self.hit_tokens,
            "requested_tokens": self.requested_tokens,
            "hit_rate": self.hit_tokens / self.requested_tokens if self.requested_tokens else 0.0,
            "evicted_tokens": self.evicted_tokens,
            "num_nodes": num_nodes,
            "cached_tokens": cached_tokens,
        }
