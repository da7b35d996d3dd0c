"""The ``priority`` request field (SGLang's), shared by every generate API."""

from __future__ import annotations

from typing import Any

from radixlm.runtime.server.errors import ApiError


def parse_priority(value: Any) -> int | None:
    """An integer or null; with ``--enable-priority-scheduling`` a larger value is admitted first
    (smaller with ``--schedule-low-priority-values-first``); without it the value is ignored, as in
    SGLang by default."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise ApiError("priority must be an integer", param="priority")
    return value
