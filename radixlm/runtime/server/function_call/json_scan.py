"""A scanner for a JSON object that may still be arriving: where each top-level value starts and ends."""

from __future__ import annotations

from dataclasses import dataclass, field

_WS = " \t\r\n"


@dataclass
class ObjectScan:
    """Top-level members of an object read so far: key -> (value start, value end or None)."""

    members: dict[str, tuple[int, int | None]] = field(default_factory=dict)
    end: int | None = None  # index after the closing brace; None while incomplete
    malformed: bool = False


def skip_ws(s: str, i: int) -> int:
    while i < len(s) and s[i] in _WS:
        i += 1
    return i


def string_end(s: str, i: int) -> int | None:
    """``s[i]`` is a quote: the index after the closing quote, None when the string is incomplete."""
    j = i + 1
    while j < len(s):
        if s[j] == "\\":
            j += 2
            continue
        if s[j] == '"':
            return j + 1
        j += 1
    return None


def value_end(s: str, i: int) -> int | None:
    """The index after the JSON value starting at ``s[i]``; None when it may still continue."""
    if i >= len(s):
        return None
    if s[i] == '"':
        return string_end(s, i)
    if s[i] in "{[":
        depth, j = 0, i
        while j < len(s):
            c = s[j]
            if c == '"':
                end = string_end(s, j)
                if end is None:
                    return None
                j = end
                continue
            if c in "{[":
                depth += 1
            elif c in "}]":
                depth -= 1
                if depth == 0:
                    return j + 1
            j += 1
        return None
    j = i
    while j < len(s) and s[j] not in ",}]" + _WS:
        j += 1
    return j if j < len(s) else None  # a number at the end may have more digits coming


def scan_object(s: str, i: int) -> ObjectScan:
    """Scan the object whose ``{`` is at ``s[i]``."""
    out = ObjectScan()
    j = skip_ws(s, i + 1)
    while j < len(s):
        if s[j] == "}":
            out.end = j + 1
            return out
        if s[j] != '"':
            out.malformed = True
            return out
        key_end = string_end(s, j)
        if key_end is None:
            return out
        key = s[j + 1 : key_end - 1]
        j = skip_ws(s, key_end)
        if j >= len(s):
            return out
        if s[j] != ":":
            out.malformed = True
            return out
        start = skip_ws(s, j + 1)
        end = value_end(s, start)
        out.members[key] = (start, end)
        if end is None:
            return out
        j = skip_ws(s, end)
        if j < len(s) and s[j] == ",":
            j = skip_ws(s, j + 1)
        elif j < len(s) and s[j] != "}":
            out.malformed = True
            return out
    return out
