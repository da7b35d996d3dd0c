"""Tool-call parsers on scripted model outputs: whole, and streamed with a cut at every point."""

from __future__ import annotations

import json

import pytest

from radixlm.runtime.server.function_call.registry import get_parser, parser_for_template, resolve_parser
from radixlm.runtime.server.function_call.streaming import ChatOutputReader
from tests.runtime.server.function_call.stream_check import check_every_split

WEATHER = '{"city": "Paris", "days": [1, 2], "note": "a \\"quoted\\" } brace"}'

CASES = [
    (
        "hermes",
        'Let me check.\n\n<tool_call>\n{"name": "get_weather", "arguments": ' + WEATHER + "}\n</tool_call>",
        "Let me check.",
        [("get_weather", WEATHER)],
    ),
    (
        "hermes",
        '<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>\n'
        '<tool_call>\n{"name": "b", "arguments": {}}\n</tool_call>',
        "",
        [("a", '{"x": 1}'), ("b", "{}")],
    ),
    ("hermes", "Text with a < sign and <tool but no call.", "Text with a < sign and <tool but no call.", []),
    ("hermes", "<tool_call>\nnot json</tool_call>", "<tool_call>\nnot json</tool_call>", []),
    ("qwen", '<tool_call>\n{"name": "f", "arguments": {"q": "x"}}\n</tool_call>', "", [("f", '{"q": "x"}')]),
    ("llama3", '{"name": "get_weather", "parameters": ' + WEATHER + "}", "", [("get_weather", WEATHER)]),
    (
        "llama3",
        '<|python_tag|>{"name": "a", "parameters": {"x": 1}}; {"name": "b", "parameters": {"y": 2}}',
        "",
        [("a", '{"x": 1}'), ("b", '{"y": 2}')],
    ),
    ("llama3", "The answer is 4.", "The answer is 4.", []),
    ("llama3", '{"answer": 4}', '{"answer": 4}', []),
    (
        "mistral",
        '[TOOL_CALLS] [{"name": "a", "arguments": ' + WEATHER + '}, {"name": "b", "arguments": {}}]',
        "",
        [("a", WEATHER), ("b", "{}")],
    ),
    ("mistral", '[{"name": "a", "arguments": {"x": 1}}]', "", [("a", '{"x": 1}')]),
    ("mistral", 'Sure [TOOL_CALLS] [{"name": "a", "arguments": {}}]', "Sure", [("a", "{}")]),
    ("mistral", "[1, 2, 3] are numbers", "[1, 2, 3] are numbers", []),
    (
        "pythonic",
        "[get_weather(city=\"Paris\", days=[1, 2]), now(zone='UTC')]",
        "",
        [("get_weather", '{"city": "Paris", "days": [1, 2]}'), ("now", '{"zone": "UTC"}')],
    ),
    ("pythonic", "[not a call] at all", "[not a call] at all", []),
    ("pythonic", "Hello (world)", "Hello (world)", []),
]


@pytest.mark.parametrize("parser_name,text,content,calls", CASES)
def test_parser_whole_and_every_split(parser_name, text, content, calls):
    reader = ChatOutputReader(None, get_parser(parser_name))
    got = check_every_split(reader, text)
    assert got["content"] == content
    assert got["calls"] == calls
    for _, arguments in got["calls"]:
        json.loads(arguments)


def test_arguments_stream_in_fragments():
    """Arguments are sent as they are generated, not only once the call is whole."""
    from radixlm.runtime.server.function_call.streaming import DeltaTracker

    reader, tracker = ChatOutputReader(None, get_parser("hermes")), DeltaTracker()
    text = '<tool_call>\n{"name": "f", "arguments": {"text": "a long argument"}}\n</tool_call>'
    fragments = []
    for k in range(len(text) + 1):
        for c in tracker.delta(reader.read(text[:k], final=False)).get("tool_calls", []):
            fragments.append(c["function"].get("arguments"))
    assert len([f for f in fragments if f]) > 5
    assert "".join(f or "" for f in fragments) == '{"text": "a long argument"}'


@pytest.mark.parametrize("parser", ["hermes", "qwen25", "mistral", "llama3"])
def test_a_call_cut_off_by_max_tokens_is_no_call(parser):
    """Issue 27: a finished output cut inside a call returns the whole calls before it, never the cut
    one with arguments that are not JSON; while the output still grows, the partial call streams."""
    p = get_parser(parser)
    whole = p.render_all([("f", {"x": "done"}), ("g", {"x": "unfinished"})])
    cut = whole[: whole.index("unfini") + len("unfini")]
    reader = ChatOutputReader(None, p)
    final = reader.read(cut, final=True)
    assert [(c.name, json.loads(c.arguments)) for c in final.calls] == [("f", {"x": "done"})]
    growing = reader.read(cut, final=False)
    assert [c.name for c in growing.calls] == ["f", "g"] and not growing.calls[-1].done


def test_parser_picked_from_template():
    assert parser_for_template("{{ '<tool_call>' }}").name == "hermes"
    assert parser_for_template("{{ '[TOOL_CALLS]' }}").name == "mistral"
    assert parser_for_template("{{ '<|python_tag|>' }}").name == "llama3"
    assert parser_for_template(None).name == "hermes"
    assert resolve_parser("pythonic", "{{ '<tool_call>' }}").name == "pythonic"
    with pytest.raises(ValueError, match="unknown tool call parser 'nope'"):
        get_parser("nope")
