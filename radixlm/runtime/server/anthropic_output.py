"""A chat output (``ChatSnapshot``s as it grows) as Anthropic content blocks and stream events.

``BlockWriter`` turns each newer snapshot into ``content_block_start`` / ``content_block_delta`` /
``content_block_stop`` events (thinking, then text, then one ``tool_use`` block per call) and keeps
the blocks they add up to: a non-streamed answer is the same writer fed the final snapshot once, so
both forms of an answer agree by construction.
"""

from __future__ import annotations

import json
from typing import Any

from radixlm.runtime.server.function_call.streaming import ChatSnapshot

Event = dict[str, Any]  # one SSE event's data; its ``type`` is also the ``event:`` line


def _tool_id(index: int, message_id: str) -> str:
    return f"toolu_{message_id.removeprefix('msg_')[:20]}{index:02d}"


class BlockWriter:
    """Content blocks of one answer. ``max_calls`` 1: ``disable_parallel_tool_use`` (later calls are
    dropped); ``show_thinking`` False: thinking ``display: omitted`` (blocks without their text)."""

    def __init__(self, message_id: str, max_calls: int | None, show_thinking: bool = True) -> None:
        self.message_id = message_id
        self.max_calls = max_calls
        self.show_thinking = show_thinking
        self.blocks: list[dict[str, Any]] = []
        self._open: tuple[str, int] | None = None  # ("thinking" | "text" | "tool_use", call index)
        self._sent = {"thinking": 0, "text": 0}
        self._arguments: list[str] = []  # per call: the argument text sent so far
        self.calls = 0

    def update(self, snap: ChatSnapshot) -> list[Event]:
        """Events bringing the blocks up to ``snap`` (snapshots only grow)."""
        events: list[Event] = []
        if snap.reasoning and len(snap.reasoning) > self._sent["thinking"]:
            self._grow(events, ("thinking", 0), snap.reasoning)
        if len(snap.content) > self._sent["text"]:
            self._grow(events, ("text", 0), snap.content)
        calls = snap.calls if self.max_calls is None else snap.calls[: self.max_calls]
        for i, call in enumerate(calls):
            if i == len(self._arguments):
                self._switch(events, ("tool_use", i), call.name)
                self._arguments.append("")
            if len(call.arguments) > len(self._arguments[i]):
                if self._open != ("tool_use", i):  # arguments of an earlier call: never reopened
                    continue
                delta = call.arguments[len(self._arguments[i]) :]
                self._arguments[i] = call.arguments
                events.append(self._delta({"type": "input_json_delta", "partial_json": delta}))
        self.calls = len(self._arguments)
        return events

    def finish(self) -> list[Event]:
        """Close the open block; every ``tool_use`` block gets its parsed ``input``."""
        events: list[Event] = []
        self._close(events)
        calls = iter(self._arguments)
        for block in self.blocks:
            if block["type"] == "tool_use":
                block["input"] = _input_object(next(calls))
        return events

    def _grow(self, events: list[Event], kind: tuple[str, int], text: str) -> None:
        self._switch(events, kind)
        name = kind[0]
        delta, self._sent[name] = text[self._sent[name] :], len(text)
        if name == "thinking" and not self.show_thinking:
            return
        self.blocks[-1][name] += delta
        delta_type = "thinking_delta" if name == "thinking" else "text_delta"
        events.append(self._delta({"type": delta_type, name: delta}))

    def _switch(self, events: list[Event], kind: tuple[str, int], name: str = "") -> None:
        if self._open == kind:
            return
        self._close(events)
        self._open = kind
        if kind[0] == "thinking":
            block: dict[str, Any] = {"type": "thinking", "thinking": "", "signature": ""}
        elif kind[0] == "text":
            block = {"type": "text", "text": ""}
        else:
            block = {"type": "tool_use", "id": _tool_id(kind[1], self.message_id), "name": name, "input": {}}
        self.blocks.append(block)
        start = {"type": "content_block_start", "index": len(self.blocks) - 1, "content_block": dict(block)}
        events.append(start)

    def _close(self, events: list[Event]) -> None:
        if self._open is None:
            return
        if self._open[0] == "thinking":  # no signature: nothing here checks thinking sent back
            events.append(self._delta({"type": "signature_delta", "signature": ""}))
        events.append({"type": "content_block_stop", "index": len(self.blocks) - 1})
        self._open = None

    def _delta(self, delta: dict[str, Any]) -> Event:
        return {"type": "content_block_delta", "index": len(self.blocks) - 1, "delta": delta}


def _input_object(arguments: str) -> dict[str, Any]:
    """A call's arguments as the ``input`` object. Under ``any``/``tool`` (and ``auto`` once a call
    opens) the grammar makes them parse; a call cut off by ``max_tokens`` keeps what parsed: nothing."""
    try:
        value = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def stop_reason(
    finish: dict[str, Any], called: bool, stop_sequences: list[str] | None, room_left: bool = True
) -> tuple[str, str | None]:
    """(``stop_reason``, ``stop_sequence``) of a finished sample's finish reason; ``room_left`` False:
    it stopped short of ``max_tokens`` because the context window was full."""
    if finish.get("type") == "length":
        return ("max_tokens" if room_left else "model_context_window_exceeded"), None
    matched = finish.get("matched")
    if isinstance(matched, str) and matched in (stop_sequences or []):
        return "stop_sequence", matched
    return ("tool_use" if called else "end_turn"), None


def usage(meta: dict[str, Any]) -> dict[str, Any]:
    """Anthropic's usage: ``input_tokens`` excludes the prompt tokens read from the radix cache."""
    cached = meta.get("cached_tokens", 0)
    return {
        "input_tokens": meta["prompt_tokens"] - cached,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
        "output_tokens": meta["completion_tokens"],
    }


def sse_event(event: Event) -> str:
    """One server-sent event as Anthropic writes them: an ``event:`` line naming the type, then data."""
    return f"event: {event['type']}\ndata: {json.dumps(event, ensure_ascii=False)}\n\n"
