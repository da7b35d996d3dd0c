"""``TokenUsage``: prompt and completion tokens a remote-API backend was billed, as SGLang exposes them."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass
class TokenUsage:
    """Token counts summed over every request a backend sent (``backend.token_usage``); ``reset()``
    starts over. Safe to update from the worker threads of ``run_batch``."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, usage: Any) -> None:
        """Add an API response's ``usage`` (an object or a dict with the two counts; None adds nothing)."""
        if usage is None:
            return
        get = usage.get if isinstance(usage, dict) else lambda key: getattr(usage, key, None)
        with self._lock:
            self.prompt_tokens += int(get("prompt_tokens") or get("input_tokens") or 0)
            self.completion_tokens += int(get("completion_tokens") or get("output_tokens") or 0)

    def reset(self) -> None:
        with self._lock:
            self.prompt_tokens = self.completion_tokens = 0
