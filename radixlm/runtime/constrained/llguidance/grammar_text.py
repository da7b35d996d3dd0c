"""Grammar kinds -> llguidance grammar text (cheap: no compilation; errors are ``ValueError``).

Beside the kinds every backend has (``regex``, ``json``, ``json_object``, ``choices``, ``dtype``),
llguidance takes ``ebnf`` (GBNF as in llama.cpp / SGLang's ``root ::= ...``, or Lark syntax) and
``structural_tag`` (see ``structural_tag.py``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, TypeGuard

import llguidance

from radixlm.runtime.constrained.grammar_inputs import parse_choices, parse_schema
from radixlm.runtime.constrained.grammar_kinds import check_regex_features, dtype_regex, unknown_kind
from radixlm.runtime.constrained.json_whitespace import FREE_WHITESPACE
from radixlm.runtime.constrained.llguidance.schema_strengthen import strengthen
from radixlm.runtime.constrained.llguidance.structural_tag import structural_tag_grammar

if TYPE_CHECKING:  # only llguidance's type stubs define it
    from llguidance._lib import JsonCompileOptions

_DATA_KEYS = frozenset({"enum", "const", "default", "examples"})


def _is_number(x: Any) -> TypeGuard[int | float]:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _check_ranges(node: Any, path: str = "") -> None:
    """An empty numeric range anywhere (even in an optional property) is a client error, as it is with
    outlines; llguidance alone would only rule the property out."""
    if isinstance(node, list):
        for i, x in enumerate(node):
            _check_ranges(x, f"{path}/{i}")
        return
    if not isinstance(node, dict):
        return
    lo, hi = node.get("minimum"), node.get("maximum")
    if _is_number(lo) and _is_number(hi) and lo > hi:
        raise ValueError(
            f"unsupported json_schema: empty numeric range at {path or '/'}: "
            f"minimum ({lo}) is greater than maximum ({hi})"
        )
    for key, value in node.items():
        if key not in _DATA_KEYS:
            _check_ranges(value, f"{path}/{key}")


def _json_grammar(schema_text: str, whitespace_pattern: str) -> str:
    schema = parse_schema(schema_text)
    _check_ranges(schema)
    options: JsonCompileOptions
    if whitespace_pattern == FREE_WHITESPACE:
        options = {"whitespace_flexible": True}
    else:
        options = {"whitespace_pattern": whitespace_pattern}
    return llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema), overrides=options)


def strengthened_grammar(kind: str, text: str, whitespace_pattern: str) -> str | None:
    """For a JSON schema: the grammar of its sound rewrite (``schema_strengthen``), None if unchanged."""
    if kind != "json":
        return None
    schema = json.loads(text)
    rewritten = strengthen(schema)
    if rewritten == schema:
        return None
    return _json_grammar(json.dumps(rewritten), whitespace_pattern)


def _choices_grammar(choices_json: str) -> str:
    choices = parse_choices(choices_json)
    return llguidance.LLMatcher.grammar_from_lark("start: " + " | ".join(json.dumps(c) for c in choices))


def _ebnf_grammar(text: str) -> str:
    if not isinstance(text, str) or not text.strip():
        raise ValueError("ebnf must be a non-empty grammar")
    try:
        return llguidance.grammar_from("ebnf", text)
    except ValueError as e:
        raise ValueError(f"invalid ebnf: {e}") from None


def llg_grammar(kind: str, text: str, whitespace_pattern: str) -> str:
    """The llguidance grammar for ``(kind, text)``; ``ValueError`` for an unknown kind or bad text."""
    if kind == "regex":
        check_regex_features(text)
        return llguidance.LLMatcher.grammar_from_regex(text)
    if kind == "json":
        return _json_grammar(text, whitespace_pattern)
    if kind == "json_object":
        return _json_grammar('{"type": "object"}', whitespace_pattern)
    if kind == "choices":
        return _choices_grammar(text)
    if kind == "dtype":
        return llguidance.LLMatcher.grammar_from_regex(dtype_regex(text))
    if kind == "ebnf":
        return _ebnf_grammar(text)
    if kind == "structural_tag":
        return structural_tag_grammar(text)
    raise unknown_kind(kind)
