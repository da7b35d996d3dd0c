"""Whitespace between JSON tokens (the server flag ``json_whitespace_pattern``), alike on every backend.

The default is BOUNDED, so a model can never loop on whitespace between tokens.
"""

from __future__ import annotations

DEFAULT_WHITESPACE = r"[ ]?"
FREE_WHITESPACE = r"[\n\t\r ]*"


def resolve_whitespace_pattern(flag: str | None) -> str:
    """Server flag -> regex: None is the bounded default, ``"free"`` any whitespace, else the regex itself."""
    if flag is None:
        return DEFAULT_WHITESPACE
    if flag == "free":
        return FREE_WHITESPACE
    return flag
