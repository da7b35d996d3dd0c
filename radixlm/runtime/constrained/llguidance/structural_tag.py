"""``structural_tag``: free text, with a JSON schema's grammar inside each tagged region (SGLang's shape).

``{"type": "structural_tag", "structures": [{"begin": str, "schema": {...}, "end": str}, ...],
"triggers": [str, ...]}``: the model writes freely until it emits a trigger; from there it must finish
the ``begin`` of a structure whose ``begin`` starts with that trigger, then a JSON value valid under its
``schema``, then its ``end``; after that it writes freely again (more tagged regions may follow).
This is the triggered grammar behind ``tool_choice="auto"``. Compiled by llguidance (lazy lexemes).
"""

from __future__ import annotations

import json
from typing import Any

import llguidance


def _parse(text: str) -> dict[str, Any]:
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"structural_tag is not valid JSON: {e}") from None
    if not isinstance(spec, dict):
        raise ValueError("structural_tag must be a JSON object")
    if spec.get("type", "structural_tag") != "structural_tag":
        raise ValueError(f"structural_tag.type must be 'structural_tag', got {spec.get('type')!r}")
    unknown = sorted(set(spec) - {"type", "structures", "triggers"})
    if unknown:
        raise ValueError(f"structural_tag has unknown field(s): {', '.join(unknown)}")
    return spec


def _trigger_for(begin: str, triggers: list[str], i: int) -> str:
    matching = [t for t in triggers if begin.startswith(t)]
    if not matching:
        raise ValueError(f"structural_tag.structures[{i}].begin {begin!r} starts with none of the triggers")
    return max(matching, key=len)


def structural_tag_grammar(text: str) -> str:
    """The llguidance grammar for a structural tag given as JSON text; ``ValueError`` naming the field."""
    spec = _parse(text)
    structures, triggers = spec.get("structures"), spec.get("triggers")
    if not isinstance(structures, list) or not structures:
        raise ValueError("structural_tag.structures must be a non-empty list")
    if not isinstance(triggers, list) or not triggers or not all(isinstance(t, str) and t for t in triggers):
        raise ValueError("structural_tag.triggers must be a non-empty list of non-empty strings")
    tags = []
    for i, s in enumerate(structures):
        if not isinstance(s, dict):
            raise ValueError(f"structural_tag.structures[{i}] must be an object")
        for name in ("begin", "end"):
            if not isinstance(s.get(name), str):
                raise ValueError(f"structural_tag.structures[{i}].{name} must be a string")
        unknown = sorted(set(s) - {"begin", "schema", "end"})
        if unknown:
            raise ValueError(f"structural_tag.structures[{i}] has unknown field(s): {', '.join(unknown)}")
        schema = s.get("schema", {})
        if isinstance(schema, bool):
            schema = {} if schema else {"not": {}}
        if not isinstance(schema, dict):
            raise ValueError(f"structural_tag.structures[{i}].schema must be a JSON schema object")
        trigger = _trigger_for(s["begin"], triggers, i)
        tags.append(llguidance.StructTag(trigger=trigger, begin=s["begin"], grammar=schema, end=s["end"]))
    # Triggers are matched as text (lazily), also when the tokenizer has them as single tokens.
    return llguidance.StructTag.to_grammar(tags, assume_special=False)
