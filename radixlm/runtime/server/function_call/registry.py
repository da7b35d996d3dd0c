"""``--tool-call-parser`` names, and the parser a chat template implies when none is given."""

from __future__ import annotations

from radixlm.runtime.server.function_call.formats import JSON_PARSERS
from radixlm.runtime.server.function_call.parsers import ToolCallParser
from radixlm.runtime.server.function_call.pythonic import PythonicParser

PARSERS: dict[str, type[ToolCallParser]] = {**JSON_PARSERS, "pythonic": PythonicParser}


def get_parser(name: str) -> ToolCallParser:
    try:
        return PARSERS[name]()
    except KeyError:
        known = ", ".join(PARSERS)
        raise ValueError(f"unknown tool call parser {name!r} (expected one of: {known})") from None


def parser_for_template(template: str | None) -> ToolCallParser:
    """The format a chat template teaches its model; hermes (our default tool prompt) otherwise."""
    text = template or ""
    if "[TOOL_CALLS]" in text:
        return get_parser("mistral")
    if "<|python_tag|>" in text or ("ipython" in text and "parameters" in text):
        return get_parser("llama3")
    if "[func_name1(" in text or "pythonic" in text:
        return get_parser("pythonic")
    return get_parser("hermes")


def resolve_parser(name: str | None, template: str | None) -> ToolCallParser:
    """``--tool-call-parser`` (None or "auto": from the template)."""
    if name in (None, "auto"):
        return parser_for_template(template)
    return get_parser(name)
