"""Regex and JSON-schema cases of growing difficulty, shared by the unit and the end-to-end tests.

Every regex is in the common subset of Python ``re`` and Rust ``regex`` (checked with ``re.fullmatch``);
every schema is supported by the JSON-schema converter (checked with ``jsonschema``).
"""

from __future__ import annotations

REGEX_CASES: list[tuple[str, str]] = [
    ("digit", r"[0-9]"),
    ("yes_no", r"(yes|no)"),
    ("integer", r"-?(0|[1-9][0-9]*)"),
    ("three_digits", r"[0-9]{3}"),
    ("word", r"[a-z]+"),
    ("capitalized", r"[A-Z][a-z]{1,10}"),
    ("decimal", r"[0-9]+\.[0-9]{2}"),
    ("phone", r"\([0-9]{3}\) [0-9]{3}-[0-9]{4}"),
    ("date", r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"),
    ("time", r"([01][0-9]|2[0-3]):[0-5][0-9]"),
    (
        "ipv4",
        r"((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}"
        r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])",
    ),
    ("email", r"[a-z0-9._]{1,20}@[a-z0-9]{1,10}\.(com|org|net)"),
    ("hex_color", r"#[0-9a-fA-F]{6}"),
    ("uuid", r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"),
    ("sentence", r"[A-Z][a-z ,]{0,40}\."),
    ("quoted", r'"[^"\n]{0,30}"'),
    ("csv_row", r"[a-z]{1,8}(,[a-z]{1,8}){2}"),
    ("key_value", r"[a-z_]+=[0-9]+"),
    ("list_of_ints", r"\[([0-9]+(, [0-9]+)*)?\]"),
    ("bool_word", r"(true|false)"),
    ("semver", r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"),
    ("url", r"https?://[a-z0-9]{1,12}(\.[a-z]{2,6}){1,2}(/[a-z0-9]{1,8}){0,3}"),
    ("tagged", r"<b>[a-z ]{1,20}</b>"),
    ("answer_line", r"Answer: (A|B|C|D)"),
    ("multi_line", r"[a-z]{1,10}\n[a-z]{1,10}"),
    ("unicode_names", r"(café|naïve|日本|Ünïcode)"),
    ("any_short", r".{1,12}"),
    ("scientific", r"-?[0-9]\.[0-9]{1,4}e[+-][0-9]{1,2}"),
    ("python_call", r"[a-z_]{1,10}\(([0-9]+(, [0-9]+){0,3})?\)"),
    ("json_pair", r'\{"[a-z]{1,8}": [0-9]{1,4}\}'),
    ("markdown_item", r"- \[( |x)\] [A-Za-z ]{1,30}"),
    ("sql_select", r"SELECT [a-z]+(, [a-z]+)* FROM [a-z]+( WHERE [a-z]+ = [0-9]+)?;"),
]

_OBJ = "object"

SCHEMA_CASES: list[tuple[str, dict]] = [
    ("string", {"type": "string"}),
    ("integer", {"type": "integer"}),
    ("number", {"type": "number"}),
    ("boolean", {"type": "boolean"}),
    ("null", {"type": "null"}),
    ("enum_strings", {"enum": ["red", "green", "blue"]}),
    ("const", {"const": "fixed"}),
    ("int_range", {"type": "integer", "minimum": 3, "maximum": 120}),
    ("negative_range", {"type": "integer", "minimum": -50, "maximum": -7}),
    ("number_range", {"type": "number", "minimum": -90, "maximum": 90}),
    ("exclusive_range", {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10}),
    ("short_string", {"type": "string", "minLength": 2, "maxLength": 5}),
    ("pattern_string", {"type": "string", "pattern": "[A-Z]{2}[0-9]{3}"}),
    ("one_field", {"type": _OBJ, "properties": {"name": {"type": "string"}}, "required": ["name"]}),
    (
        "two_fields",
        {
            "type": _OBJ,
            "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer"}},
            "required": ["name", "age"],
        },
    ),
    (
        "optional_field",
        {
            "type": _OBJ,
            "properties": {"id": {"type": "integer"}, "note": {"type": "string"}},
            "required": ["id"],
        },
    ),
    ("all_optional", {"type": _OBJ, "properties": {"a": {"type": "boolean"}, "b": {"type": "null"}}}),
    (
        "bounded_field",
        {
            "type": _OBJ,
            "properties": {
                "age": {"type": "integer", "minimum": 0, "maximum": 150},
                "score": {"type": "number", "minimum": 0, "maximum": 1},
            },
            "required": ["age", "score"],
        },
    ),
    (
        "enum_field",
        {
            "type": _OBJ,
            "properties": {"color": {"enum": ["red", "green", "blue"]}, "size": {"enum": [1, 2, 3]}},
            "required": ["color", "size"],
        },
    ),
    ("array_ints", {"type": "array", "items": {"type": "integer"}}),
    (
        "array_bounded",
        {"type": "array", "items": {"type": "string", "maxLength": 6}, "minItems": 1, "maxItems": 3},
    ),
    ("array_exact", {"type": "array", "items": {"type": "boolean"}, "minItems": 2, "maxItems": 2}),
    (
        "object_with_array",
        {
            "type": _OBJ,
            "properties": {"tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 4}},
            "required": ["tags"],
        },
    ),
    (
        "nested_object",
        {
            "type": _OBJ,
            "properties": {
                "user": {
                    "type": _OBJ,
                    "properties": {"name": {"type": "string", "maxLength": 10}, "admin": {"type": "boolean"}},
                    "required": ["name", "admin"],
                }
            },
            "required": ["user"],
        },
    ),
    ("any_of", {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 5}]}),
    (
        "nullable_field",
        {
            "type": _OBJ,
            "properties": {"x": {"anyOf": [{"type": "integer"}, {"type": "null"}]}},
            "required": ["x"],
        },
    ),
    ("type_list", {"type": _OBJ, "properties": {"v": {"type": ["string", "integer"]}}, "required": ["v"]}),
    (
        "array_of_objects",
        {
            "type": "array",
            "items": {
                "type": _OBJ,
                "properties": {
                    "k": {"type": "string", "maxLength": 4},
                    "v": {"type": "integer", "minimum": 0, "maximum": 9},
                },
                "required": ["k", "v"],
            },
            "maxItems": 3,
        },
    ),
    (
        "refs",
        {
            "$defs": {
                "point": {
                    "type": _OBJ,
                    "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
                    "required": ["x", "y"],
                }
            },
            "type": _OBJ,
            "properties": {"a": {"$ref": "#/$defs/point"}, "b": {"$ref": "#/$defs/point"}},
            "required": ["a", "b"],
        },
    ),
    (
        "date_format",
        {"type": _OBJ, "properties": {"day": {"type": "string", "format": "date"}}, "required": ["day"]},
    ),
    (
        "person",
        {
            "type": _OBJ,
            "properties": {
                "name": {"type": "string", "maxLength": 12},
                "age": {"type": "integer", "minimum": 0, "maximum": 120},
                "email": {"type": "string", "pattern": "[a-z]{1,8}@[a-z]{1,8}\\.com"},
                "languages": {
                    "type": "array",
                    "items": {"enum": ["en", "fr", "de"]},
                    "minItems": 1,
                    "maxItems": 3,
                },
                "address": {
                    "type": _OBJ,
                    "properties": {
                        "city": {"type": "string", "maxLength": 10},
                        "zip": {"type": "string", "pattern": "[0-9]{5}"},
                    },
                    "required": ["city", "zip"],
                },
            },
            "required": ["name", "age", "email", "languages", "address"],
        },
    ),
    (
        "deep_nesting",
        {
            "type": _OBJ,
            "properties": {
                "a": {
                    "type": _OBJ,
                    "properties": {
                        "b": {
                            "type": _OBJ,
                            "properties": {
                                "c": {
                                    "type": "array",
                                    "items": {"type": "integer", "minimum": 1, "maximum": 5},
                                    "maxItems": 2,
                                }
                            },
                            "required": ["c"],
                        }
                    },
                    "required": ["b"],
                }
            },
            "required": ["a"],
        },
    ),
    (
        "tool_call",
        {
            "type": _OBJ,
            "properties": {
                "tool": {"enum": ["search", "calculator", "weather"]},
                "arguments": {
                    "anyOf": [
                        {
                            "type": _OBJ,
                            "properties": {"query": {"type": "string", "maxLength": 15}},
                            "required": ["query"],
                        },
                        {
                            "type": _OBJ,
                            "properties": {"expression": {"type": "string", "pattern": "[0-9+*/ -]{1,10}"}},
                            "required": ["expression"],
                        },
                    ]
                },
            },
            "required": ["tool", "arguments"],
        },
    ),
]
