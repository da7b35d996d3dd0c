"""A response's output items built from the growing output (``ChatSnapshot``s), with the stream events
each step adds.

Items come in the order the output writes them: ``reasoning`` (the reasoning parser's thinking), a
``message`` (its text as one ``output_text`` part), then one ``function_call`` per tool call. An item
is opened (``response.output_item.added``) when its first text arrives and closed
(``...done`` events, ``response.output_item.done``) when the next one opens or the output ends. A
non-streaming response runs the same builder once on the finished output and keeps its items.
"""

from __future__ import annotations

import uuid
from typing import Any

from radixlm.runtime.server.function_call.streaming import ChatSnapshot, new_call_id

Event = dict[str, Any]  # a stream event without its sequence_number


def _item_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


class OutputBuilder:
    """The output items of one response; ``update`` takes each newer snapshot."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self._open: int | None = None  # index of the item still growing
        self._reasoning: int | None = None
        self._message: int | None = None
        self._calls: list[int] = []  # item index of each tool call
        self.status = "completed"  # the closing status of items ("incomplete": cut by the token limit)

    def update(self, snap: ChatSnapshot, final: bool) -> list[Event]:
        """The events that bring the items up to ``snap``; ``final`` closes the last item."""
        events: list[Event] = []
        if snap.reasoning:
            if self._reasoning is None:
                self._reasoning = self._add(events, _reasoning_item(), "reasoning_text")
            events += self._grow(self._reasoning, snap.reasoning, "response.reasoning_text.delta")
        if snap.content or (final and not self.items and not snap.calls):
            if self._message is None:
                self._message = self._add(events, _message_item(), "output_text")
            events += self._grow(self._message, snap.content, "response.output_text.delta")
        for i, call in enumerate(snap.calls):
            if i == len(self._calls):
                self._calls.append(self._add(events, _call_item(call.name), None))
            events += self._grow(self._calls[i], call.arguments, "response.function_call_arguments.delta")
        if final:
            self._close(events)
        return events

    def _add(self, events: list[Event], item: dict[str, Any], part: str | None) -> int:
        self._close(events)
        index = len(self.items)
        self.items.append(item)
        self._open = index
        events.append({"type": "response.output_item.added", "output_index": index, "item": _copy(item)})
        if part is not None:
            events.append(
                {**self._where(index), "type": "response.content_part.added", "part": _part(part, "")}
            )
        return index

    def _grow(self, index: int, text: str, event: str) -> list[Event]:
        item = self.items[index]
        have = _text(item)
        if index != self._open or len(text) <= len(have):
            return []  # NOTE: snapshots only grow, and an item only grows while it is the open one
        _set_text(item, text)
        delta = {**self._where(index), "type": event, "delta": text[len(have) :]}
        if item["type"] == "function_call":
            delta.pop("content_index")
        elif item["type"] == "message":
            delta["logprobs"] = []
        return [delta]

    def _close(self, events: list[Event]) -> None:
        index, self._open = self._open, None
        if index is None:
            return
        item = self.items[index]
        where = self._where(index)
        text = _text(item)
        if item["type"] == "function_call":
            events.append({**where, "type": "response.function_call_arguments.done", "arguments": text})
            events[-1].pop("content_index")
        elif item["type"] == "message":
            events.append({**where, "type": "response.output_text.done", "text": text, "logprobs": []})
            events.append({**where, "type": "response.content_part.done", "part": _part("output_text", text)})
        else:
            events.append({**where, "type": "response.reasoning_text.done", "text": text})
            events.append(
                {**where, "type": "response.content_part.done", "part": _part("reasoning_text", text)}
            )
        if item["type"] != "function_call":
            _set_text(item, text)  # an empty item still has its one content part
        item["status"] = self.status
        events.append({"type": "response.output_item.done", "output_index": index, "item": _copy(item)})

    def _where(self, index: int) -> dict[str, Any]:
        return {"item_id": self.items[index]["id"], "output_index": index, "content_index": 0}


def _part(kind: str, text: str) -> dict[str, Any]:
    if kind == "output_text":
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {"type": kind, "text": text}


def _reasoning_item() -> dict[str, Any]:
    return {"id": _item_id("rs"), "type": "reasoning", "summary": [], "content": [], "status": "in_progress"}


def _message_item() -> dict[str, Any]:
    return {
        "id": _item_id("msg"),
        "type": "message",
        "role": "assistant",
        "status": "in_progress",
        "content": [],
    }


def _call_item(name: str) -> dict[str, Any]:
    return {
        "id": _item_id("fc"),
        "type": "function_call",
        "call_id": new_call_id(),
        "name": name,
        "arguments": "",
        "status": "in_progress",
    }


def _text(item: dict[str, Any]) -> str:
    if item["type"] == "function_call":
        return item["arguments"]
    return item["content"][0]["text"] if item["content"] else ""


def _set_text(item: dict[str, Any], text: str) -> None:
    if item["type"] == "function_call":
        item["arguments"] = text
    else:
        item["content"] = [_part("output_text" if item["type"] == "message" else "reasoning_text", text)]


def _copy(item: dict[str, Any]) -> dict[str, Any]:
    return {**item, "content": [dict(p) for p in item["content"]]} if "content" in item else dict(item)
