"""The JSON tool-call formats: hermes/qwen ``<tool_call>``, llama3 JSON, mistral ``[TOOL_CALLS]``."""

from __future__ import annotations

import re

from radixlm.program.reasoning import partial_suffix
from radixlm.runtime.server.function_call.json_scan import skip_ws
from radixlm.runtime.server.function_call.parsers import (
    CallWrapper,
    Snapshot,
    ToolCallParser,
    held_content,
    read_call_sequence,
)

_OPEN_LIST = re.compile(r"\[\s*")
_LIST_OF_OBJECTS = re.compile(r"\[\s*\{")


class HermesParser(ToolCallParser):
    """``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`` after text (Qwen, Hermes)."""

    name = "hermes"
    wrapper = CallWrapper(prefix="<tool_call>\n", suffix="\n</tool_call>", separator="\n")
    trigger = "<tool_call>"

    def scan(self, text: str, final: bool) -> Snapshot:
        start = text.find(self.trigger)
        if start < 0:
            hold = 0 if final else partial_suffix(text, self.trigger)
            return Snapshot(held_content(text[: len(text) - hold], final))
        calls, malformed = read_call_sequence(text, start, ("arguments", "parameters"), self.wrapper)
        if malformed:  # not a call after all: it is content
            return Snapshot(held_content(text, final))
        return Snapshot(text[:start].rstrip(), calls)


class MistralParser(ToolCallParser):
    """``[TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]`` (the marker may be skipped as special)."""

    name = "mistral"
    marker = "[TOOL_CALLS]"
    wrapper = CallWrapper(open="[TOOL_CALLS] [", separator=", ", close="]")
    trigger = "[TOOL_CALLS]"

    def scan(self, text: str, final: bool) -> Snapshot:
        start = text.find(self.marker)
        if start >= 0:
            body, content = start + len(self.marker), text[:start].rstrip()
        else:
            body, content = skip_ws(text, 0), ""
            rest = text[body:]
            if not final and (self.marker.startswith(rest) or _OPEN_LIST.fullmatch(rest)):
                return Snapshot("")
            if not _LIST_OF_OBJECTS.match(rest):
                hold = 0 if final else partial_suffix(text, self.marker)
                return Snapshot(held_content(text[: len(text) - hold], final))
        i = skip_ws(text, body)
        if i >= len(text):
            return Snapshot(content)
        if text[i] != "[":
            return Snapshot(held_content(text, final))
        calls, malformed = read_call_sequence(text, i + 1, ("arguments",), self.wrapper)
        if malformed:
            return Snapshot(held_content(text, final))
        return Snapshot(content, calls)


class Llama3Parser(ToolCallParser):
    """Llama 3.x JSON calls: ``{"name": ..., "parameters": {...}}`` (``;``-separated) opening the output,
    optionally after ``<|python_tag|>``."""

    name = "llama3"
    tag = "<|python_tag|>"
    wrapper = CallWrapper(prefix="", separator="; ", arguments_key="parameters")

    def scan(self, text: str, final: bool) -> Snapshot:
        i = skip_ws(text, 0)
        if text.startswith(self.tag, i):
            i = skip_ws(text, i + len(self.tag))
        rest = text[i:]
        if not final and (not rest or self.tag.startswith(rest)):
            return Snapshot("")
        if not rest.startswith("{"):
            return Snapshot(held_content(text, final))
        calls, malformed = read_call_sequence(text, i, ("parameters", "arguments"), self.wrapper)
        if malformed:
            return Snapshot(held_content(text, final))
        return Snapshot("", calls)


JSON_PARSERS: dict[str, type[ToolCallParser]] = {
    "hermes": HermesParser,
    "qwen": HermesParser,
    "qwen25": HermesParser,
    "mistral": MistralParser,
    "llama3": Llama3Parser,
}
