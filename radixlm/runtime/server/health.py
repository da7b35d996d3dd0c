"""What ``/health`` answers: why the server cannot serve right now, or None."""

from __future__ import annotations

import time
from typing import Any


def unhealthy_reason(tokenizer_manager: Any, server_args: Any) -> str | None:
    """A dead child or a failed receive loop (``TokenizerManager.fail``), a draining server, or a
    scheduler loop silent for ``health_stall_timeout`` (it sends a ``Heartbeat`` every second, even
    when idle)."""
    if tokenizer_manager.dead is not None:
        return tokenizer_manager.dead
    if tokenizer_manager.admission.draining is not None:
        return f"the server is shutting down: {tokenizer_manager.admission.draining}"
    silent = time.monotonic() - tokenizer_manager.last_heartbeat
    if silent > server_args.health_stall_timeout:
        return f"the scheduler loop has not turned for {silent:.0f} s (stalled)"
    return None
