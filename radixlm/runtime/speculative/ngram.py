"""N-gram / prompt-lookup proposals: the tokens that followed the request's last n tokens where they
occurred before in its own prompt and output. No second model."""

from __future__ import annotations

import numpy as np

# NOTE: a copy only pays from a few tokens of context: a 1-token match proposes noise in free text.
DEFAULT_MIN_MATCH = 2
DEFAULT_MAX_MATCH = 4


class NgramProposer:
    """Matches the last ``n`` tokens (``n`` from ``max_match`` down to ``min_match``) against the
    earlier tokens of the same sequence; the most recent occurrence wins (it is the likeliest copy
    source in an edit or a quote)."""

    def __init__(self, min_match: int = DEFAULT_MIN_MATCH, max_match: int = DEFAULT_MAX_MATCH) -> None:
        if not 1 <= min_match <= max_match:
            raise ValueError(f"n-gram match sizes need 1 <= min ({min_match}) <= max ({max_match})")
        self.min_match = min_match
        self.max_match = max_match

    def propose(self, tokens: list[int], k: int) -> list[int]:
        """Up to ``k`` tokens guessed to follow ``tokens``; empty when no n-gram matches."""
        n_tokens = len(tokens)
        if k <= 0 or n_tokens <= self.min_match:
            return []
        arr = np.asarray(tokens, dtype=np.int64)
        for n in range(min(self.max_match, n_tokens - 1), self.min_match - 1, -1):
            start = _last_occurrence(arr, n)
            if start >= 0:
                follow = arr[start + n : start + n + k]
                return follow.tolist()
        return []


def _last_occurrence(arr: np.ndarray, n: int) -> int:
    """Start of the latest earlier occurrence of ``arr[-n:]`` (not the suffix itself), or -1."""
    body = arr[:-1]  # an occurrence must be followed by at least one token
    if body.size < n:
        return -1
    ok = body[n - 1 :] == arr[-1]  # ok[e]: an occurrence could end at body position e + n - 1
    for i in range(1, n):
        ok &= body[n - 1 - i : body.size - i] == arr[-1 - i]
    hits = np.flatnonzero(ok)
    return int(hits[-1]) if hits.size else -1
