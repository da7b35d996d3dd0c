"""Grammar kinds -> one regex: the single language every constraint is compiled through.

Kinds (``SamplingParams.constraint``): ``regex`` (the text is the regex), ``json`` (a JSON schema),
``json_object`` (any JSON object; the text is ignored), ``choices`` (a JSON list of strings) and
``dtype`` (``int``, ``float``, ``bool``, ``str``).
"""

from __future__ import annotations

import re

from outlines_core import Index, Vocabulary

from radixlm.runtime.constrained.grammar_inputs import parse_choices
from radixlm.runtime.constrained.json_schema import (
    DEFAULT_WHITESPACE,
    json_object_regex,
    json_schema_to_regex,
)

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
        if text not in DTYPE_REGEXES:
            raise ValueError(f"unsupported dtype {text!r}: expected one of {', '.join(DTYPE_REGEXES)}")
        return DTYPE_REGEXES[text]
    if kind in LLGUIDANCE_ONLY_KINDS:
        raise ValueError(f"{kind} grammars have no regex form: they are compiled by llguidance")
    raise ValueError(f"unknown grammar kind {kind!r}: expected one of {', '.join(GRAMMAR_KINDS)}")


def check_regex_features(regex: str) -> None:
    """Raise ``ValueError`` for regex features no backend supports (look-around, ``\\b``, anchors)."""
    if _LOOKAROUND.search(regex):
        raise ValueError(f"unsupported regex {regex[:80]!r}: look-around assertions are not supported")
    if re.search(r"(?<!\\)(\\\\)*\\[bB]", regex):
        raise ValueError(f"unsupported regex {regex[:80]!r}: word boundaries (\\b, \\B) are not supported")
    if regex.startswith("^") or regex.endswith("$") and not regex.endswith("\\$"):
        raise ValueError(f"unsupported regex {regex[:80]!r}: anchors ^ and $ are implicit, remove them")


def check_regex(regex: str) -> None:
    """Raise ``ValueError`` unless outlines-core can compile ``regex`` (fast: a 256-byte vocabulary)."""
    check_regex_features(regex)
    try:
        Index(regex, _BYTE_VOCAB)
    except ValueError as e:
        raise ValueError(f"invalid regex {regex[:80]!r}: {str(e).splitlines()[0][:200]}") from None
