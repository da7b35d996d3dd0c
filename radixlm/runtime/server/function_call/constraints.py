"""Grammars for tool calls that always parse.

- ``required`` or a named function: the whole output is the parser's call text around a JSON
  object whose ``name`` is one of the tools and whose arguments follow that tool's parameter
  schema, as a regex for the constrained decoder, at most ``MAX_PARALLEL_TOOL_CALLS`` calls
  (``strict`` under ``auto`` relies on the next item);
- ``auto``: a ``structural_tag`` (free text until the parser's trigger, e.g. ``<tool_call>``, then
  the call under the grammar to its end);
- with a reasoning parser the grammar waits for the end of the thinking (trigger ``</think>``).
"""

from __future__ import annotations

import json
from typing import Any

from radixlm.runtime.constrained.outlines.json_schema import json_schema_to_regex
from radixlm.runtime.server.function_call.parsers import CallWrapper, ToolCallParser
from radixlm.runtime.server.function_call.protocol import FunctionDef

MAX_PARALLEL_TOOL_CALLS = 8  # calls in one answer under tool_choice="required" (the grammar ends there)
_PLAIN = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 <>/_:,\"'=;@!#%&~`")


def literal_regex(text: str) -> str:
    out = []
    for c in text:
        out.append(c if c in _PLAIN else "\\n" if c == "\n" else "\\t" if c == "\t" else "\\" + c)
    return "".join(out)


def call_object_schema(fn: FunctionDef, arguments_key: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"name": {"const": fn.name}, arguments_key: fn.schema},
        "required": ["name", arguments_key],
    }


def forced_call_regex(functions: list[FunctionDef], wrapper: CallWrapper, parallel: bool) -> str:
    """The parser's text for one call (several with ``parallel``) of one of ``functions``."""
    options = []
    for fn in functions:
        try:
            options.append(json_schema_to_regex(json.dumps(call_object_schema(fn, wrapper.arguments_key))))
        except ValueError as e:
            raise ValueError(f"tools: function {fn.name!r}: {e}") from None
    one = literal_regex(wrapper.prefix) + "(" + "|".join(options) + ")" + literal_regex(wrapper.suffix)
    more = f"({literal_regex(wrapper.separator)}{one}){{0,{MAX_PARALLEL_TOOL_CALLS - 1}}}"
    calls = one + more if parallel else one
    return literal_regex(wrapper.open) + calls + literal_regex(wrapper.close)


def call_structures(
    functions: list[FunctionDef], wrapper: CallWrapper, lead: str = ""
) -> list[dict[str, Any]]:
    """structural_tag structures: ``lead`` + the call's text up to its arguments, their schema, the rest."""
    key = wrapper.arguments_key
    opening = lead + wrapper.open + wrapper.prefix + "{"
    return [
        {
            "begin": opening + f'"name": {json.dumps(fn.name)}, "{key}": ',
            "schema": fn.schema,
            "end": "}" + wrapper.suffix + wrapper.close,
        }
        for fn in functions
    ]


def structural_tag(structures: list[dict[str, Any]], triggers: list[str]) -> str:
    return json.dumps({"type": "structural_tag", "structures": structures, "triggers": triggers})


def tool_sampling_params(
    functions: list[FunctionDef],
    forced: bool,
    parser: ToolCallParser,
    parallel: bool,
    reasoning_end: str | None,
) -> dict[str, str]:
    """Sampling params that constrain the call(s): ``{}`` when nothing can or needs to be constrained.

    ``forced``: a call must be made (``required``/named; ``functions`` then holds the allowed ones).
    """
    wrapper = parser.wrapper
    if wrapper is None:
        return {}
    if reasoning_end is not None:  # the grammar starts where the thinking ends
        lead = reasoning_end + ("\n\n" if forced else "")
        triggers = [reasoning_end] if forced else [t for t in (parser.trigger,) if t]
        return (
            {
                "structural_tag": structural_tag(
                    call_structures(functions, wrapper, lead if forced else ""), triggers
                )
            }
            if triggers
            else {}
        )
    if forced:
        return {"regex": forced_call_regex(functions, wrapper, parallel)}
    if parser.trigger:
        return {"structural_tag": structural_tag(call_structures(functions, wrapper), [parser.trigger])}
    return {}


def response_format_after_reasoning(schema: str, reasoning_end: str) -> dict[str, str]:
    """``response_format`` under a reasoning parser: the schema applies after ``</think>``."""
    structures = [{"begin": reasoning_end + "\n\n", "schema": json.loads(schema), "end": ""}]
    return {"structural_tag": structural_tag(structures, [reasoning_end])}
