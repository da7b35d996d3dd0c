"""``stop_regex`` patterns: checked with RE2 (linear time, no backtracking) and searched incrementally.

A pattern is compiled once per request (``StopRegexes``), never per step. Each step searches only the
text that can hold a *new* match: one ending in the newest token's characters. For patterns whose
matches are at most ``W`` characters long (``max_width``), that is the last ``W`` characters before the
newest token plus the token itself; the search starts there (``pos``), with the characters before it
still visible as context so that ``^``, ``\\A`` and ``\\b`` keep their meaning. A pattern with unbounded
matches (``a.*b``) is searched over the whole output, still in linear time.

Python's ``re`` and RE2 differ in small ways: RE2 has no backreferences and no look-around (refused
with a 400 naming the construct), ``\\w``, ``\\d`` and ``\\b`` are ASCII-only, and ``$`` matches only at the
very end (not before a final newline).
"""

from __future__ import annotations

import re
from typing import Any

import re2

MAX_STOP_REGEXES = 32  # patterns per request
MAX_STOP_REGEX_CHARS = 1024  # one pattern
MAX_STOP_REGEX_MEMORY = 1 << 20  # bytes RE2 may use for one compiled pattern
# NOTE: a match longer than this is treated as unbounded (whole-output search): windows this wide
# already cost about as much as searching an ordinary output.
MAX_WINDOW_CHARS = 4096

_UNSUPPORTED = (
    (re.compile(r"\(\?<?[=!]"), "look-around assertions ((?=, (?!, (?<=, (?<!)"),
    (re.compile(r"(?<!\\)(?:\\\\)*\\[1-9]"), "backreferences (\\1 ... \\9)"),
    (re.compile(r"\(\?P="), "named backreferences ((?P=name))"),
    (re.compile(r"\(\?>"), "atomic groups ((?>...))"),
    (re.compile(r"(?<!\\)(?:\\\\)*[*+?}][+]"), "possessive quantifiers (*+, ++, ?+)"),
)


def _options() -> Any:
    options = re2.Options()
    options.log_errors = False
    options.max_mem = MAX_STOP_REGEX_MEMORY
    return options


def compile_stop_regex(pattern: str) -> Any:
    """The RE2 program of ``pattern``; ``ValueError`` naming what is wrong (size, an unsupported
    construct, a syntax error, or a program above ``MAX_STOP_REGEX_MEMORY``)."""
    if len(pattern) > MAX_STOP_REGEX_CHARS:
        raise ValueError(f"a stop_regex is {len(pattern)} characters, at most {MAX_STOP_REGEX_CHARS} allowed")
    for construct, name in _UNSUPPORTED:
        if construct.search(pattern):
            raise ValueError(f"stop_regex {pattern[:80]!r} uses {name}, which stop_regex does not support")
    try:
        return re2.compile(pattern, _options())
    except re2.error as e:
        reason = e.args[0].decode() if e.args and isinstance(e.args[0], bytes) else str(e)
        raise ValueError(f"invalid stop_regex {pattern[:80]!r}: {reason}") from None


def max_width(pattern: str) -> int | None:
    """The most characters one match of ``pattern`` spans, or None when unbounded (or not known)."""
    try:
        _, high = re._parser.parse(pattern).getwidth()  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - RE2 syntax Python lacks (e.g. \pL): search everything
        return None
    return high if high <= MAX_WINDOW_CHARS else None


class StopRegexes:
    """One request's compiled patterns and the width of the text that must be searched each step."""

    def __init__(self, patterns: list[str]) -> None:
        self.programs = [compile_stop_regex(p) for p in patterns]
        widths = [max_width(p) for p in patterns]
        self.width: int | None = None if any(w is None for w in widths) else max(w or 0 for w in widths)
        self.checked_len = 0  # output tokens searched so far (0: search everything next time)

    def forget_from(self, index: int) -> None:
        """Output tokens from ``index`` on were removed or replaced: search them again."""
        self.checked_len = min(self.checked_len, index)

    def search(self, text: str, pos: int = 0) -> str | None:
        """The first non-empty match starting at ``pos`` or later (``text`` before it is context)."""
        for program in self.programs:
            m = program.search(text, pos)
            if m is not None and m.group(0):
                return m.group(0)
        return None
