"""Grammar kinds -> one regex: the single language outlines-core compiles every constraint through.

``ebnf`` and ``structural_tag`` have no regex form; llguidance compiles them whichever backend is chosen.
"""

from __future__ import annotations

import re

from outlines_core import Index, Vocabulary

from radixlm.runtime.constrained.grammar_inputs import parse_choices
from radixlm.runtime.constrained.grammar_kinds import (
    LLGUIDANCE_ONLY_KINDS,
    check_regex_features,
    dtype_regex,
    unknown_kind,
)
from radixlm.runtime.constrained.json_whitespace import DEFAULT_WHITESPACE
from radixlm.runtime.constrained.outlines.json_schema import json_object_regex, json_schema_to_regex

_BYTE_VOCAB = Vocabulary(256, {bytes([b]): [b] for b in range(256)})


def choices_regex(choices_json: str) -> str:
    """Alternation of the escaped literal choices (a JSON list of non-empty strings)."""
    return "(" + "|".join(re.escape(c) for c in parse_choices(choices_json)) + ")"


def grammar_to_regex(kind: str, text: str, whitespace_pattern: str = DEFAULT_WHITESPACE) -> str:
    """The regex for a ``(kind, text)`` constraint; ``ValueError`` for an unknown kind or bad text."""
    if kind == "regex":
        return text
    if kind == "json":
        return json_schema_to_regex(text, whitespace_pattern)
    if kind == "json_object":
        return json_object_regex(whitespace_pattern)
    if kind == "choices":
        return choices_regex(text)
    if kind == "dtype":
        return dtype_regex(text)
    if kind in LLGUIDANCE_ONLY_KINDS:
        raise ValueError(f"{kind} grammars have no regex form: they are compiled by llguidance")
    raise unknown_kind(kind)


def check_regex(regex: str) -> None:
    """Raise ``ValueError`` unless outlines-core can compile ``regex`` (fast: a 256-byte vocabulary)."""
    check_regex_features(regex)
    try:
        Index(regex, _BYTE_VOCAB)
    except ValueError as e:
        raise ValueError(f"invalid regex {regex[:80]!r}: {str(e).splitlines()[0][:200]}") from None
