"""Why a request finished: stopped on a match, ran out of length, or was aborted.

The scheduler and the stop checker build these; ``to_dict`` gives the wire format that
``ReqTokenOut.finish_reason`` carries to the detokenizer, the Engine and the HTTP server.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FinishStop:
    """Stopped on an EOS/stop token id (``matched`` is the id), a stop string (the string), or the
    grammar's end (None)."""

    matched: int | str | None

    def to_dict(self) -> dict[str, Any]:
        return {"type": "stop", "matched": self.matched}


@dataclass(frozen=True)
class FinishLength:
    """Stopped by ``max_new_tokens`` or the context length; ``length`` is the limit that was hit."""

    length: int

    def to_dict(self) -> dict[str, Any]:
        return {"type": "length", "length": self.length}


@dataclass(frozen=True)
class FinishAbort:
    """Ended without a normal stop: rejected, failed, or aborted by the client."""

    message: str
    status_code: int = 400

    def to_dict(self) -> dict[str, Any]:
        return {"type": "abort", "message": self.message, "status_code": self.status_code}


FinishReason = FinishStop | FinishLength | FinishAbort


def finish_reason_dict(reason: FinishReason | None) -> dict[str, Any] | None:
    """The wire format of ``reason`` (None while the request runs)."""
    return None if reason is None else reason.to_dict()
