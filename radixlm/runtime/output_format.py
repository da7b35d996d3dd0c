"""Shape scheduler outputs into the SGLang-compatible response dict (HTTP /generate and Engine)."""
from __future__ import annotations

from typing import Any, Optional


def format_logprobs(entries: Optional[list], tokenizer, with_text: bool) -> list[list[Any]]:
    """``[(logprob, token_id), ...]`` -> ``[[logprob, token_id, text-or-None], ...]``."""
    if not entries:
        return []
    return [[lp, tid, tokenizer.decode([tid]) if with_text else None] for lp, tid in entries]


def format_top_logprobs(entries: Optional[list], tokenizer, with_text: bool) -> list[Any]:
    """Per position ``[(logprob, token_id), ...]`` (or None) -> the same with text entries."""
    if not entries:
        return []
    return [None if pos is None else format_logprobs(pos, tokenizer, with_text) for pos in entries]


def public_finish_reason(reason: Optional[dict[str, Any]]) -> Optional[dict[str, Any]]:
    """The finish reason as clients see it (internal fields dropped)."""
    if reason is None:
        return None
    return {k: v for k, v in reason.items() if k != "status_code"}
