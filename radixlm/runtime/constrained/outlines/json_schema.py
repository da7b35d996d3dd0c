"""JSON schema -> regex, on top of ``outlines_core.json_schema.build_regex_from_schema``.

Two additions to outlines-core:

- numeric bounds: outlines-core ignores ``minimum``/``maximum``; bounded ``integer``/``number``
  subschemas are swapped for a placeholder before the conversion and the placeholder for a range regex
  after it (non-integral bounds of a ``number`` are tightened to integers, so output stays valid);
- whitespace: ``json_whitespace_pattern`` (bounded by default, see ``json_whitespace.py``).
"""

from __future__ import annotations

import json
import math
from typing import Any

from outlines_core.json_schema import build_regex_from_schema

from radixlm.runtime.constrained.grammar_inputs import parse_schema
from radixlm.runtime.constrained.json_whitespace import DEFAULT_WHITESPACE
from radixlm.runtime.constrained.outlines.numeric_ranges import integer_range_regex, number_range_regex

JSON_OBJECT_DEPTH = 2

_STRING = r'"([^"\\\x00-\x1F\x7F-\x9F]|\\["\\/bfnrt])*"'
_NUMBER = r"(-)?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?"
_DATA_KEYS = frozenset({"enum", "const", "default", "examples"})
_PLACEHOLDER = "RADIXLMNUMERICRANGE{}"


def _bounds(node: dict[str, Any]) -> tuple[int | None, int | None]:
    """Integral ``[lo, hi]`` inside the node's bounds (None = unbounded)."""
    lo = hi = None
    if isinstance(node.get("minimum"), (int, float)):
        lo = math.ceil(node["minimum"])
    exclusive = node.get("exclusiveMinimum")
    if isinstance(exclusive, (int, float)) and not isinstance(exclusive, bool):
        lo = max(lo if lo is not None else -math.inf, math.floor(exclusive) + 1)
    if isinstance(node.get("maximum"), (int, float)):
        hi = math.floor(node["maximum"])
    exclusive = node.get("exclusiveMaximum")
    if isinstance(exclusive, (int, float)) and not isinstance(exclusive, bool):
        hi = min(hi if hi is not None else math.inf, math.ceil(exclusive) - 1)
    return lo, hi


def _replace_bounded_numbers(node: Any, ranges: list[str]) -> Any:
    """Copy of ``node`` with bounded numeric subschemas replaced by placeholder consts."""
    if isinstance(node, list):
        return [_replace_bounded_numbers(x, ranges) for x in node]
    if not isinstance(node, dict):
        return node
    kind = node.get("type")
    if kind in ("integer", "number") and any(
        k in node for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
    ):
        lo, hi = _bounds(node)
        ranges.append(integer_range_regex(lo, hi) if kind == "integer" else number_range_regex(lo, hi))
        return {"const": _PLACEHOLDER.format(len(ranges) - 1)}
    return {k: (v if k in _DATA_KEYS else _replace_bounded_numbers(v, ranges)) for k, v in node.items()}


# Keywords outlines-core accepts but does not enforce (measured: the regex is the same with and without
# them; ``allOf`` becomes the members' texts one after another), so an output could break them; refused,
# so an accepted schema never yields an invalid output.
_UNENFORCED = (
    "allOf",
    "uniqueItems",
    "contains",
    "minContains",
    "maxContains",
    "patternProperties",
    "propertyNames",
    "maxProperties",
    "dependentRequired",
    "dependentSchemas",
    "multipleOf",
    "not",
    "if",
    "then",
    "else",
    "unevaluatedProperties",
    "unevaluatedItems",
)
_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
_SCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SCHEMA_VALUES = (
    "items",
    "additionalProperties",
    "additionalItems",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
)


_COMBINATORS = ("allOf", "anyOf", "oneOf")
_ANNOTATIONS = frozenset(
    {
        "$schema",
        "$id",
        "$comment",
        "$defs",
        "definitions",
        "title",
        "description",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
    }
)


def unenforced_keyword(node: Any, keywords: tuple[str, ...]) -> str | None:
    """The first of ``keywords`` used anywhere in the schema ``node`` (property names aside), or None.

    A combinator beside other constraints also counts (measured: outlines-core then drops one side,
    e.g. ``allOf`` next to ``properties``)."""
    if not isinstance(node, dict):
        return None
    for key in keywords:
        if key in node:
            return key
    names = node.get("properties")
    if isinstance(names, dict) and any(_needs_escape(name) for name in names):
        return "properties (a name that needs JSON escaping)"
    combinators = [k for k in _COMBINATORS if k in node]
    if combinators and (len(combinators) > 1 or set(node) - _ANNOTATIONS - set(combinators)):
        return f"{combinators[0]} beside other keywords"
    children: list[Any] = [node.get(k) for k in _SCHEMA_VALUES]
    for k in _SCHEMA_MAPS:
        if isinstance(node.get(k), dict):
            children.extend(node[k].values())
    for k in _SCHEMA_LISTS:
        if isinstance(node.get(k), list):
            children.extend(node[k])
    for child in children:
        found = unenforced_keyword(child, keywords)
        if found is not None:
            return found
    return None


def _needs_escape(name: str) -> bool:
    """Whether a property name is written differently inside a JSON string (outlines-core writes it raw)."""
    return json.dumps(name, ensure_ascii=False)[1:-1] != name


def json_schema_to_regex(schema_text: str, whitespace_pattern: str = DEFAULT_WHITESPACE) -> str:
    """Regex for the JSON documents valid under ``schema_text``; ``ValueError`` if unsupported."""
    schema = parse_schema(schema_text)
    ranges: list[str] = []
    rewritten = _replace_bounded_numbers(schema, ranges)
    # Bounds left after the rewrite sit where it cannot place a range (e.g. a type list).
    keyword = unenforced_keyword(schema, _UNENFORCED) or unenforced_keyword(rewritten, _BOUNDS)
    if keyword is not None:
        raise ValueError(
            f"unsupported json_schema: keyword {keyword!r} is not enforced by the outlines "
            "grammar backend (the llguidance backend supports more)"
        )
    try:
        regex = build_regex_from_schema(json.dumps(rewritten), whitespace_pattern)
    except (ValueError, TypeError) as e:
        raise ValueError(f"unsupported json_schema: {str(e).splitlines()[0]}") from None
    for i, rx in enumerate(ranges):
        quoted = '"' + _PLACEHOLDER.format(i) + '"'
        if quoted not in regex:
            raise ValueError("unsupported json_schema: numeric bounds in an unsupported position")
        regex = regex.replace(quoted, rx)
    return regex


def json_value_regex(depth: int, ws: str) -> str:
    """Regex for any JSON value with objects/arrays nested at most ``depth`` levels."""
    scalar = f"({_STRING}|{_NUMBER}|true|false|null)"
    value = scalar
    for _ in range(depth):
        member = f"{_STRING}{ws}:{ws}{value}"
        obj = rf"\{{{ws}({member}({ws},{ws}{member})*)?{ws}\}}"
        arr = rf"\[{ws}({value}({ws},{ws}{value})*)?{ws}\]"
        value = f"({scalar}|{obj}|{arr})"
    return value


def json_object_regex(ws: str = DEFAULT_WHITESPACE, depth: int = JSON_OBJECT_DEPTH) -> str:
    """Regex for any JSON object (``response_format: json_object``), nested at most ``depth`` levels."""
    inner = json_value_regex(depth - 1, ws)
    member = f"{_STRING}{ws}:{ws}{inner}"
    return rf"\{{{ws}({member}({ws},{ws}{member})*)?{ws}\}}"
