"""``TokenUsage``: prompt and completion tokens a remote-API backend was billed, as SGLang exposes them."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any


def counts(usage: Any) -> tuple[int, int]:
    """``(prompt, completion)`` tokens of an OpenAI-style or Anthropic-style ``usage`` (object or
    dict). Anthropic counts prompt tokens read from or written to its cache apart: they are added."""
    get = usage.get if isinstance(usage, dict) else lambda key: getattr(usage, key, None)
    if get("input_tokens") is not None:
        parts = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
        return sum(int(get(k) or 0) for k in parts), int(get("output_tokens") or 0)
    return int(get("prompt_tokens") or 0), int(get("completion_tokens") or 0)


@dataclass
class TokenUsage:
    """Token counts summed over every request a backend sent (``backend.token_usage``); ``reset()``
    starts over. Safe to update from the worker threads of ``run_batch``."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, usage: Any) -> None:
        """Add an API response's ``usage`` (see ``counts``; None adds nothing)."""
        if usage is None:
            return
        prompt, completion = counts(usage)
        with self._lock:
            self.prompt_tokens += prompt
            self.completion_tokens += completion

    def reset(self) -> None:
        with self._lock:
            self.prompt_tokens = self.completion_tokens = 0
