"""The text a request is routed by: what its prompt starts with, for the prefix index."""

from __future__ import annotations

import json
from typing import Any


def routing_key(path: str, body: dict[str, Any]) -> str:
    """``/generate``: its text (or ids); completions: the prompt; chat: the messages in order.
    For a batch, the first prompt (a batch goes to one worker)."""
    if path.endswith("/chat/completions"):
        return json.dumps(body.get("messages"), ensure_ascii=False, separators=(",", ":"))[:-1]
    value = body.get("text", body.get("prompt", body.get("input_ids")))
    if isinstance(value, list) and value and isinstance(value[0], (str, list)):
        value = value[0]
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return value if isinstance(value, str) else ""
