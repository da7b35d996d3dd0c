"""Request ids: the client's rid, and the ids the runtime gives the samples of an ``n > 1`` request.

A sample runs under ``{rid}\\x1f{i}``. Client rids may not hold the separator (``check_client_rid``
refuses it), so no client rid can ever equal, alias or abort another request's sample; the parent
-> samples relation is tracked explicitly wherever aborts are resolved, never parsed back from
strings. Responses show a sample as ``{rid}-{i}`` (``public_rid``), as before.
"""

from __future__ import annotations

SAMPLE_SEPARATOR = "\x1f"  # ASCII unit separator: a control character no client rid may contain
MAX_ID_CHARS = 256  # rids and session ids: echoed in every stream chunk, so a long one costs each chunk


class InvalidRid(ValueError):
    """A client rid the runtime cannot take."""


def sample_rid(parent_rid: str, index: int) -> str:
    """The internal id of sample ``index`` of ``parent_rid``."""
    return f"{parent_rid}{SAMPLE_SEPARATOR}{index}"


def public_rid(rid: str) -> str:
    """The id a response shows: the client's rid, or ``{rid}-{i}`` for a sample."""
    return rid.replace(SAMPLE_SEPARATOR, "-")


def check_client_rid(rid: object) -> None:
    """Raise ``InvalidRid`` unless ``rid`` is a non-empty string of at most ``MAX_ID_CHARS``
    characters without control characters."""
    if not isinstance(rid, str) or not rid:
        raise InvalidRid("rid must be a non-empty string")
    if len(rid) > MAX_ID_CHARS:
        raise InvalidRid(f"rid has {len(rid)} characters; at most {MAX_ID_CHARS} are allowed")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in rid):
        raise InvalidRid("rid must not contain control characters")
