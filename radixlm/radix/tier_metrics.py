"""Per-tier counters of the hierarchical cache: hits, bytes moved and load latency."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TierCounters:
    """One lower tier's cumulative counters (since construction or the last ``reset``)."""

    hit_tokens: int = 0  # prompt tokens served by loading them back from this tier
    loaded_bytes: int = 0
    load_seconds: float = 0.0
    loads: int = 0
    written_tokens: int = 0
    written_bytes: int = 0
    dropped_tokens: int = 0  # tokens this tier gave up for room (or could not take)
    errors: int = 0  # unreadable, foreign or unwritable entries skipped with a warning

    def record_load(self, tokens: int, nbytes: int, seconds: float) -> None:
        self.hit_tokens += tokens
        self.loaded_bytes += nbytes
        self.load_seconds += seconds
        self.loads += 1

    def record_write(self, tokens: int, nbytes: int) -> None:
        self.written_tokens += tokens
        self.written_bytes += nbytes

    def as_dict(self, prefix: str) -> dict[str, float]:
        """The counters under ``<prefix>_<name>`` plus the mean load latency in milliseconds."""
        mean_ms = 1000.0 * self.load_seconds / self.loads if self.loads else 0.0
        return {
            f"{prefix}_hit_tokens": self.hit_tokens,
            f"{prefix}_loaded_bytes": self.loaded_bytes,
            f"{prefix}_load_seconds": self.load_seconds,
            f"{prefix}_loads": self.loads,
            f"{prefix}_load_ms_mean": mean_ms,
            f"{prefix}_written_tokens": self.written_tokens,
            f"{prefix}_written_bytes": self.written_bytes,
            f"{prefix}_dropped_tokens": self.dropped_tokens,
            f"{prefix}_errors": self.errors,
        }
