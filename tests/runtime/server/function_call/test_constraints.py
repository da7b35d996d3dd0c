"""The grammar of a forced tool call accepts exactly the calls the parser reads back."""

from __future__ import annotations

import json
import re

import pytest

from radixlm.runtime.server.function_call.constraints import (
    call_structures,
    forced_call_regex,
    tool_sampling_params,
)
from radixlm.runtime.server.function_call.protocol import FunctionDef
from radixlm.runtime.server.function_call.registry import get_parser

WEATHER = FunctionDef(
    name="get_weather",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
        "required": ["city", "unit"],
    },
)
ADD = FunctionDef(
    name="add", parameters={"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
)
NOW = FunctionDef(name="now")  # no parameters: an empty object


@pytest.mark.parametrize("parser_name", ["hermes", "llama3", "mistral"])
def test_forced_regex_accepts_rendered_calls_and_rejects_others(parser_name):
    parser = get_parser(parser_name)
    rx = re.compile(forced_call_regex([WEATHER, ADD, NOW], parser.wrapper, parallel=True))
    good = [("get_weather", {"city": "Paris", "unit": "c"}), ("add", {"a": 3}), ("now", {})]
    text = parser.render_all(good)
    assert rx.fullmatch(text), text
    assert [(c.name, json.loads(c.arguments)) for c in parser.scan(text, final=True).calls] == good
    for bad in (
        [("get_weather", {"city": "Paris", "unit": "k"})],
        [("add", {"a": "3"})],
        [("sub", {"a": 3})],
        [("add", {})],
    ):
        assert not rx.fullmatch(parser.render_all(bad)), bad
    single = re.compile(forced_call_regex([ADD], parser.wrapper, parallel=False))
    assert single.fullmatch(parser.render_all([("add", {"a": 1})]))
    assert not single.fullmatch(parser.render_all([("add", {"a": 1}), ("add", {"a": 2})]))


def test_pythonic_calls_are_not_forced():
    assert tool_sampling_params([ADD], True, get_parser("pythonic"), False, None) == {}


def test_structures_open_with_the_trigger():
    parser = get_parser("hermes")
    for s in call_structures([WEATHER, NOW], parser.wrapper):
        assert s["begin"].startswith(parser.trigger) and s["end"].endswith("</tool_call>")
        call = s["begin"] + json.dumps({"city": "x"}) + s["end"]
        assert parser.scan(call, final=True).calls[0].arguments == '{"city": "x"}'


def test_auto_builds_a_structural_tag_triggered_by_the_call_marker():
    params = tool_sampling_params([WEATHER, NOW], False, get_parser("hermes"), True, None)
    tag = json.loads(params["structural_tag"])
    assert tag["type"] == "structural_tag" and tag["triggers"] == ["<tool_call>"]
    assert [s["schema"] for s in tag["structures"]] == [WEATHER.schema, NOW.schema]
    forced = json.loads(
        tool_sampling_params([ADD], True, get_parser("hermes"), False, "</think>")["structural_tag"]
    )
    assert forced["triggers"] == ["</think>"] and forced["structures"][0]["begin"].startswith("</think>")


def test_response_format_after_thinking_is_a_tag_triggered_by_its_end():
    from radixlm.runtime.server.function_call import constraints

    schema = {"type": "object", "properties": {"x": {"type": "integer"}}}
    params = constraints.response_format_after_reasoning(json.dumps(schema), "</think>")
    tag = json.loads(params["structural_tag"])
    assert tag["triggers"] == ["</think>"]
    assert tag["structures"] == [{"begin": "</think>\n\n", "schema": schema, "end": ""}]


@pytest.mark.parametrize("parser_name", ["hermes", "llama3", "mistral"])
def test_parallel_forced_calls_are_bounded(parser_name):
    """Issue 27: under ``required`` the model cannot repeat calls until max_tokens: the grammar ends
    after ``MAX_PARALLEL_TOOL_CALLS`` calls."""
    from radixlm.runtime.server.function_call.constraints import MAX_PARALLEL_TOOL_CALLS

    parser = get_parser(parser_name)
    rx = re.compile(forced_call_regex([ADD], parser.wrapper, parallel=True))
    for count in (1, 2, MAX_PARALLEL_TOOL_CALLS):
        assert rx.fullmatch(parser.render_all([("add", {"a": i}) for i in range(count)])), count
    for count in (MAX_PARALLEL_TOOL_CALLS + 1, 40):
        assert not rx.fullmatch(parser.render_all([("add", {"a": i}) for i in range(count)])), count
