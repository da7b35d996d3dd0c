"""The user's grammar texts parsed and checked once for every backend: choice lists and JSON schemas."""

from __future__ import annotations

import json
from typing import Any


def parse_choices(choices_json: str) -> list[str]:
    """A JSON list of non-empty strings; ``ValueError`` naming what is wrong otherwise."""
    try:
        choices = json.loads(choices_json)
    except json.JSONDecodeError as e:
        raise ValueError(f"choices must be a JSON list of strings: {e}") from None
    if not isinstance(choices, list) or not choices or not all(isinstance(c, str) and c for c in choices):
        raise ValueError("choices must be a non-empty list of non-empty strings")
    return choices


def parse_schema(schema_text: str) -> Any:
    """A JSON schema: an object or a boolean; ``ValueError`` naming what is wrong otherwise."""
    try:
        schema = json.loads(schema_text)
    except json.JSONDecodeError as e:
        raise ValueError(f"json_schema is not valid JSON: {e}") from None
    if not isinstance(schema, (dict, bool)):
        raise ValueError("json_schema must be a JSON object")
    return schema
