"""The grammar kinds a request may carry, and what every backend checks of them alike.

Kinds (``SamplingParams.constraint``): ``regex`` (the text is the regex), ``json`` (a JSON schema),
``json_object`` (any JSON object; the text is ignored), ``choices`` (a JSON list of strings),
``dtype`` (``int``, ``float``, ``bool``, ``str``), ``ebnf`` and ``structural_tag``.
"""

from __future__ import annotations

import re

GRAMMAR_KINDS = ("regex", "json", "json_object", "choices", "dtype", "ebnf", "structural_tag")
# Kinds only llguidance compiles (with outlines selected they are compiled by llguidance anyway).
LLGUIDANCE_ONLY_KINDS = ("ebnf", "structural_tag")

DTYPE_REGEXES = {
    "int": r"-?(0|[1-9][0-9]*)",
    "float": r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?",
    "bool": r"(True|False)",
    "str": r'"([^"\\\x00-\x1F\x7F-\x9F]|\\["\\/bfnrt])*"',
}

_LOOKAROUND = re.compile(r"\(\?<?[=!]")


def dtype_regex(dtype: str) -> str:
    """The regex of a ``dtype`` grammar; ``ValueError`` for an unknown type."""
    if dtype not in DTYPE_REGEXES:
        raise ValueError(f"unsupported dtype {dtype!r}: expected one of {', '.join(DTYPE_REGEXES)}")
    return DTYPE_REGEXES[dtype]


def unknown_kind(kind: str) -> ValueError:
    """The error for a grammar kind no backend knows."""
    return ValueError(f"unknown grammar kind {kind!r}: expected one of {', '.join(GRAMMAR_KINDS)}")


def check_regex_features(regex: str) -> None:
    """Raise ``ValueError`` for regex features no backend supports (look-around, ``\\b``, anchors)."""
    if _LOOKAROUND.search(regex):
        raise ValueError(f"unsupported regex {regex[:80]!r}: look-around assertions are not supported")
    if re.search(r"(?<!\\)(\\\\)*\\[bB]", regex):
        raise ValueError(f"unsupported regex {regex[:80]!r}: word boundaries (\\b, \\B) are not supported")
    if regex.startswith("^") or regex.endswith("$") and not regex.endswith("\\$"):
        raise ValueError(f"unsupported regex {regex[:80]!r}: anchors ^ and $ are implicit, remove them")
