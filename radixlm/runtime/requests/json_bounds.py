"""JSON parsing bounded in depth, with finite numbers and well-formed strings only.

Python's ``json`` accepts ``NaN``/``Infinity`` (and turns ``1e999`` into ``inf``), recurses once per
nesting level (a body nested 100,000 levels deep raises ``RecursionError``), and keeps lone UTF-16
surrogates (``"\\ud800"``) that later fail to encode. ``load_bounded_json`` rejects all of these
with an ``InvalidJson`` naming where the problem is (a dotted path such as ``sampling_params.stop[2]``).
Used for request bodies at the front door and for user-supplied JSON schemas (Engine and server).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")
MAX_EXACT_INT = 2**53  # every integer up to here is exactly a float


class InvalidJson(ValueError):
    """Bad JSON input; ``path`` is where (``""`` for the document itself)."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.path = path


def load_bounded_json(raw: str | bytes, max_depth: int, integral_floats: bool = False) -> Any:
    """Parse ``raw``; raise ``InvalidJson`` for bad JSON, non-finite numbers, nesting deeper than
    ``max_depth`` or strings holding lone surrogates. ``integral_floats``: ``2.0`` and ``2e3`` parse
    as the ints they are (JSON has one number type, and JSON schema's ``integer`` includes them)."""
    try:
        # NOTE: NaN, Infinity and 1e999 parse to non-finite floats here; the walk below rejects
        # them with their path, so the 400 names the field.
        value = json.loads(raw, parse_float=_integral_as_int if integral_floats else None)
    except RecursionError as e:
        raise InvalidJson(f"JSON nested deeper than {max_depth} levels") from e
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, an integer of > 4300 digits
        raise InvalidJson(f"not valid JSON: {e}") from e
    check_json_value(value, max_depth)
    return value


def _integral_as_int(text: str) -> int | float:
    value = float(text)
    return int(value) if value.is_integer() and abs(value) <= MAX_EXACT_INT else value


def check_json_value(value: Any, max_depth: int, path: str = "") -> None:
    """Check an already parsed value the same way (depth, finite floats, no lone surrogates)."""
    stack: list[tuple[Any, str, int]] = [(value, path, 1)]
    while stack:
        item, where, depth = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                raise InvalidJson("a string holds a lone UTF-16 surrogate (not valid Unicode)", where)
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                raise InvalidJson(f"non-finite number {item} is not allowed", where)
            continue
        if isinstance(item, (dict, list)):
            if depth > max_depth:
                raise InvalidJson(f"JSON nested deeper than {max_depth} levels", where)
            if isinstance(item, dict):
                for key, child in item.items():
                    if isinstance(key, str) and _SURROGATE.search(key):
                        raise InvalidJson("a key holds a lone UTF-16 surrogate", where)
                    stack.append((child, f"{where}.{key}" if where else str(key), depth + 1))
            else:
                stack.extend((child, f"{where}[{i}]", depth + 1) for i, child in enumerate(item))


def top_field(path: str) -> str:
    """The top-level field of a dotted path (``sampling_params.stop[2]`` -> ``sampling_params``)."""
    return re.split(r"[.\[]", path, maxsplit=1)[0]
