"""Grammar kinds -> regex: numeric ranges, dtypes, choices, json_object."""

from __future__ import annotations

import json
import re

import pytest

from radixlm.runtime.constrained.grammar_kinds import DTYPE_REGEXES
from radixlm.runtime.constrained.json_whitespace import FREE_WHITESPACE, resolve_whitespace_pattern
from radixlm.runtime.constrained.outlines.grammar_regex import grammar_to_regex
from radixlm.runtime.constrained.outlines.json_schema import json_object_regex, json_schema_to_regex
from radixlm.runtime.constrained.outlines.numeric_ranges import integer_range_regex, number_range_regex


@pytest.mark.parametrize(
    "lo,hi",
    [
        (0, 0),
        (3, 10),
        (-5, 120),
        (0, None),
        (None, 0),
        (None, None),
        (17, None),
        (-99, -7),
        (None, -3),
        (999, 1001),
    ],
)
def test_integer_range_is_exact(lo, hi):
    rx = re.compile(integer_range_regex(lo, hi))
    for v in range(-1200, 1200):
        assert bool(rx.fullmatch(str(v))) == ((lo is None or v >= lo) and (hi is None or v <= hi)), v
    assert not any(rx.fullmatch(s) for s in ("-0", "007", "", "-"))


@pytest.mark.parametrize("lo,hi", [(0, 1), (-90, 90), (-5, -2), (0, None), (3, 3)])
def test_number_range_is_exact(lo, hi):
    rx = re.compile(number_range_regex(lo, hi))
    for s in (
        "0",
        "0.5",
        "1",
        "1.0",
        "1.5",
        "3",
        "3.25",
        "-2",
        "-2.5",
        "-5",
        "-5.1",
        "89.99",
        "90",
        "90.01",
        "120",
    ):
        v = float(s)
        assert bool(rx.fullmatch(s)) == ((lo is None or v >= lo) and (hi is None or v <= hi)), s


def test_dtypes_and_choices():
    assert re.fullmatch(DTYPE_REGEXES["int"], "-12") and not re.fullmatch(DTYPE_REGEXES["int"], "012")
    assert re.fullmatch(DTYPE_REGEXES["float"], "3.5e-2")
    assert re.fullmatch(DTYPE_REGEXES["bool"], "True")
    rx = grammar_to_regex("choices", json.dumps(["a.b", "c|d", "(x)"]))
    assert all(re.fullmatch(rx, c) for c in ("a.b", "c|d", "(x)")) and not re.fullmatch(rx, "axb")


def test_json_object_regex_matches_objects_only():
    rx = re.compile(json_object_regex())
    assert rx.fullmatch('{"a": 1, "b": [true, null], "c": {"d": "e"}}')
    assert rx.fullmatch("{}") and not rx.fullmatch("[]") and not rx.fullmatch('"s"')


def test_whitespace_flag():
    assert resolve_whitespace_pattern(None) == r"[ ]?"
    assert resolve_whitespace_pattern("free") == FREE_WHITESPACE
    assert resolve_whitespace_pattern("") == ""


@pytest.mark.parametrize(
    "schema, keyword",
    [
        ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, "uniqueItems"),
        ({"type": "integer", "multipleOf": 3}, "multipleOf"),
        ({"type": "object", "properties": {"a": {"type": "object", "maxProperties": 1}}}, "maxProperties"),
        ({"anyOf": [{"type": "string"}, {"type": "integer", "not": {"const": 1}}]}, "not"),
        ({"type": ["integer", "null"], "minimum": 1}, "minimum"),  # no place for a range regex
        (
            {
                "allOf": [
                    {"properties": {"a": {"type": "integer"}}},
                    {"properties": {"b": {"type": "integer"}}},
                ]
            },
            "allOf",
        ),  # outlines-core writes the members one after another: {"a": 1}{"b": 2}
        ({"anyOf": [{"type": "integer"}], "type": "integer"}, "anyOf beside other keywords"),
        (
            {"type": "object", "properties": {'foo"bar': {"type": "integer"}}},
            "properties \\(a name that needs JSON escaping\\)",
        ),
    ],
)
def test_outlines_refuses_keywords_it_would_not_enforce(schema, keyword):
    # outlines-core builds the same regex with or without these: an output could break them.
    with pytest.raises(ValueError, match=f"keyword '{keyword}' is not enforced"):
        json_schema_to_regex(json.dumps(schema))


def test_property_names_are_not_keywords():
    regex = json_schema_to_regex(
        json.dumps({"type": "object", "properties": {"not": {"type": "integer"}}, "required": ["not"]})
    )
    assert re.fullmatch(regex, '{"not": 3}')
