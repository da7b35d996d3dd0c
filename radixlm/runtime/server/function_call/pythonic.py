"""Pythonic tool calls: ``[get_weather(city="Paris"), get_time(zone="UTC")]`` opening the output."""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from radixlm.runtime.server.function_call.json_scan import skip_ws, string_end
from radixlm.runtime.server.function_call.parsers import PartialCall, Snapshot, ToolCallParser, held_content

_NAME = re.compile(r"[A-Za-z_][\w.]*")
_MAYBE_CALL = re.compile(r"\[\s*[\w.]*\s*$")  # could still become "[name("


class PythonicParser(ToolCallParser):
    name = "pythonic"

    def render(self, name: str, arguments: Any) -> str:
        args = arguments if isinstance(arguments, dict) else {}
        return f"{name}({', '.join(f'{k}={v!r}' for k, v in args.items())})"

    def render_all(self, calls: list[tuple[str, Any]]) -> str:
        return "[" + ", ".join(self.render(n, a) for n, a in calls) + "]"

    def scan(self, text: str, final: bool) -> Snapshot:
        i = skip_ws(text, 0)
        if not text.startswith("[", i):
            return Snapshot("" if not final and not text[i:] else held_content(text, final))
        if not final and _MAYBE_CALL.fullmatch(text[i:]):
            return Snapshot("")
        calls: list[PartialCall] = []
        i += 1
        while True:
            i = skip_ws(text, i)
            name = _NAME.match(text, i)
            paren = skip_ws(text, name.end()) if name else -1
            if name is None or not text.startswith("(", paren):
                return Snapshot(held_content(text, final) if not calls else "", calls)
            close = _matching_paren(text, paren)
            if close is None and not final:  # a call is reported once whole (its arguments are Python)
                return Snapshot("", calls)
            arguments = None if close is None else _keyword_arguments(text[name.start() : close + 1])
            if arguments is None:
                return Snapshot(held_content(text, final) if not calls else "", calls)
            calls.append(PartialCall(name.group(), arguments, done=True))
            i = skip_ws(text, close + 1)
            if not text.startswith(",", i):
                return Snapshot("", calls)
            i += 1


def _matching_paren(s: str, i: int) -> int | None:
    depth, j = 0, i
    while j < len(s):
        c = s[j]
        if c in "\"'":
            end = _py_string_end(s, j)
            if end is None:
                return None
            j = end
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                return j
        j += 1
    return None


def _py_string_end(s: str, i: int) -> int | None:
    if s[i] == '"':
        return string_end(s, i)
    j = i + 1
    while j < len(s):
        if s[j] == "\\":
            j += 2
        elif s[j] == "'":
            return j + 1
        else:
            j += 1
    return None


def _keyword_arguments(call_text: str) -> str | None:
    """``f(a=1, b="x")`` -> ``{"a": 1, "b": "x"}`` as JSON; None when it is not such a call."""
    try:
        node = ast.parse(call_text, mode="eval").body
        if not isinstance(node, ast.Call) or node.args:
            return None
        return json.dumps(
            {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg}, ensure_ascii=False
        )
    except (SyntaxError, ValueError, TypeError):
        return None
