"""Tool-call formats: a parser reads a model's output (finished or still arriving) into a ``Snapshot``.

Snapshots of a growing output are monotone: the content and each call's arguments only ever grow, a
call's name is fixed once seen, so a stream can send the difference between two snapshots and the
deltas add up to the snapshot of the finished output (the non-streaming answer). Arguments are the
model's own JSON text (not re-serialised), so they can stream as they are generated.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from radixlm.runtime.server.function_call.json_scan import scan_object, skip_ws


@dataclass
class PartialCall:
    """One call as read so far: ``arguments`` is JSON text (complete once ``done``)."""

    name: str
    arguments: str = ""
    done: bool = False


@dataclass
class Snapshot:
    content: str
    calls: list[PartialCall] = field(default_factory=list)


@dataclass(frozen=True)
class CallWrapper:
    """The text around calls in a format: ``open (prefix call suffix) (sep prefix call suffix)* close``."""

    prefix: str = ""
    suffix: str = ""
    separator: str = ""
    open: str = ""
    close: str = ""
    arguments_key: str = "arguments"


class ToolCallParser(ABC):
    """A tool-call format. ``wrapper`` None: calls cannot be generated under a JSON grammar."""

    name: ClassVar[str]
    wrapper: ClassVar[CallWrapper | None] = None
    trigger: ClassVar[str | None] = None  # the text that opens a call, for triggered grammars

    @abstractmethod
    def scan(self, text: str, final: bool) -> Snapshot:
        """Read ``text``; ``final`` False: hold back text that may still turn out to open a call."""

    def render(self, name: str, arguments: Any) -> str:
        """One call as this format writes it (for templates that cannot render tool calls)."""
        w = self.wrapper or CallWrapper()
        call = json.dumps({"name": name, w.arguments_key: arguments}, ensure_ascii=False)
        return w.prefix + call + w.suffix

    def render_all(self, calls: list[tuple[str, Any]]) -> str:
        w = self.wrapper or CallWrapper()
        return w.open + w.separator.join(self.render(n, a) for n, a in calls) + w.close


def held_content(text: str, final: bool) -> str:
    """Content to send so far: trailing whitespace waits (a call may follow it)."""
    return text if final else text.rstrip()


def read_json_call(
    text: str, start: int, keys: tuple[str, ...]
) -> tuple[PartialCall | None, int | None, bool]:
    """The call object at ``text[start] == '{'``: (call once its name is known, end index, malformed)."""
    scan = scan_object(text, start)
    name_span = scan.members.get("name")
    if scan.malformed or name_span is None or name_span[1] is None:
        ok_keys = all(k in ("name", *keys) for k in scan.members)
        return None, scan.end, scan.malformed or not ok_keys or scan.end is not None
    try:
        name = json.loads(text[name_span[0] : name_span[1]])
    except json.JSONDecodeError:
        return None, scan.end, True
    if not isinstance(name, str):
        return None, scan.end, True
    call = PartialCall(name, done=scan.end is not None)
    for key in keys:
        span = scan.members.get(key)
        if span is not None:
            call.arguments = text[span[0] : span[1] if span[1] is not None else len(text)]
            break
    else:
        if call.done:
            call.arguments = "{}"
    return call, scan.end, False


def read_call_sequence(
    text: str, i: int, keys: tuple[str, ...], wrapper: CallWrapper
) -> tuple[list[PartialCall], bool]:
    """Calls ``prefix {..} suffix`` joined by the separator from ``text[i]``: (calls, first malformed)."""
    prefix, suffix, sep = wrapper.prefix.strip(), wrapper.suffix.strip(), wrapper.separator.strip()
    calls: list[PartialCall] = []
    while True:
        if prefix:
            i = skip_ws(text, i)
            if not text.startswith(prefix, i):
                return calls, False
            i += len(prefix)
        i = skip_ws(text, i)
        if i >= len(text):
            return calls, False
        if text[i] != "{":
            return calls, not calls
        call, end, malformed = read_json_call(text, i, keys)
        if malformed:
            return calls, not calls
        if call is not None:
            calls.append(call)
        if end is None:
            return calls, False
        i = skip_ws(text, end)
        if suffix and text.startswith(suffix, i):
            i += len(suffix)
        i = skip_ws(text, i)
        if sep and text.startswith(sep, i):
            i += len(sep)
        elif not prefix:
            return calls, False
