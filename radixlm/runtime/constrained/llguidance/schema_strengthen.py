"""Rewrite JSON-schema keywords llguidance lacks into stricter keywords it has (a sound subset).

Every rewrite only removes valid documents, never adds invalid ones, so an output of the rewritten
schema always validates against the original (compliance holds; some valid outputs become unreachable):

- ``unevaluatedProperties: S`` -> ``additionalProperties: S`` (stricter: it also covers keys that
  sub-schemas evaluate); dropped when ``additionalProperties`` is already there (then a no-op).
  ``unevaluatedItems`` likewise with ``items``.
- ``if``/``then``/``else`` -> ``allOf: [then, else]`` (an instance valid under both satisfies the
  conditional whatever ``if`` says); a lone ``if`` is dropped (no effect).
- ``dependentRequired: {a: [b]}`` -> ``b`` always required; ``dependentSchemas: {a: S}`` -> ``S``
  always applies.
- ``uniqueItems: true`` -> ``maxItems: 1``; ``uniqueItems: false`` is dropped (no constraint).
- ``contains: C`` (``minContains`` n, default 1, no ``maxContains``) -> the first n items must match
  ``C`` (and ``items``), at least n items.
- ``format`` values the spec defines but llguidance does not check are dropped (draft 2020-12 makes
  ``format`` an annotation); a format the spec does not define (``"zip"``) stays an error.

Anything else (``not``, ``propertyNames``, ``maxContains``, ``$dynamicRef``) stays and is rejected.
"""

from __future__ import annotations

from typing import Any

ANNOTATION_ONLY_FORMATS = frozenset(
    {
        "uri-reference",
        "uri-template",
        "iri",
        "iri-reference",
        "idn-email",
        "idn-hostname",
        "json-pointer",
        "relative-json-pointer",
        "regex",
    }
)
_DATA_KEYS = frozenset({"enum", "const", "default", "examples"})


def strengthen(node: Any) -> Any:
    """A copy of the schema ``node`` with the rewrites of the module docstring applied recursively."""
    if isinstance(node, list):
        return [strengthen(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: (v if k in _DATA_KEYS else strengthen(v)) for k, v in node.items()}
    extra: list[Any] = []
    if "unevaluatedProperties" in out:
        value = out.pop("unevaluatedProperties")
        out.setdefault("additionalProperties", value)
    if "unevaluatedItems" in out:
        value = out.pop("unevaluatedItems")
        out.setdefault("items", value)
    branches = [out.pop(k) for k in ("then", "else") if k in out]
    if "if" in out:  # then/else without if have no effect
        out.pop("if")
        extra += branches
    if isinstance(out.get("dependentRequired"), dict):
        required = list(out.get("required", []))
        for deps in out.pop("dependentRequired").values():
            required += [d for d in deps if d not in required]
        out["required"] = required
    if isinstance(out.get("dependentSchemas"), dict):
        extra += list(out.pop("dependentSchemas").values())
    if "uniqueItems" in out:
        if out.pop("uniqueItems") is True:
            out["maxItems"] = min(out.get("maxItems", 1), 1)
    if "contains" in out and "maxContains" not in out and "prefixItems" not in out:
        count = out.pop("minContains", 1)
        contains = out.pop("contains")
        item = {"allOf": [contains, out["items"]]} if "items" in out else contains
        if count:
            out["prefixItems"] = [item] * count
            out["minItems"] = max(out.get("minItems", 0), count)
    if out.get("format") in ANNOTATION_ONLY_FORMATS:
        out.pop("format")
    if extra:
        out["allOf"] = list(out.get("allOf", [])) + extra
    return out
