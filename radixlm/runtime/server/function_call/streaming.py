"""A chat output read as it grows: thinking, content and tool calls, and the OpenAI deltas between reads."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from radixlm.program.reasoning import ReasoningParser
from radixlm.runtime.server.function_call.parsers import PartialCall, ToolCallParser


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass
class ChatSnapshot:
    reasoning: str | None  # None: no reasoning parser (or not separated)
    content: str
    calls: list[PartialCall] = field(default_factory=list)


class ChatOutputReader:
    """Splits an output into thinking (``reasoning``), content and calls (``tools`` None: no tools)."""

    def __init__(self, reasoning: ReasoningParser | None, tools: ToolCallParser | None) -> None:
        self.reasoning = reasoning
        self.tools = tools

    def read(self, text: str, final: bool) -> ChatSnapshot:
        thinking: str | None = None
        if self.reasoning is not None:
            split = self.reasoning.split(text, final)
            thinking, text = split.reasoning, split.answer
        if self.tools is None:
            return ChatSnapshot(thinking, text)
        snap = self.tools.scan(text, final)
        # NOTE: a call cut off by max_tokens is no call (its arguments are not JSON); the finish
        # reason says "length"
        calls = [c for c in snap.calls if c.done] if final else snap.calls
        return ChatSnapshot(thinking, snap.content, calls)


def message(snap: ChatSnapshot, ids: list[str]) -> dict[str, Any]:
    """The non-streaming ``message`` of a finished output."""
    out: dict[str, Any] = {
        "role": "assistant",
        "content": snap.content if snap.content or not snap.calls else None,
    }
    if snap.reasoning is not None:
        out["reasoning_content"] = snap.reasoning or None
    if snap.calls:
        out["tool_calls"] = [
            {"id": ids[i], "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for i, c in enumerate(snap.calls)
        ]
    return out


class DeltaTracker:
    """What a stream has sent; ``delta`` gives the next chunk's ``delta`` for a newer snapshot."""

    def __init__(self) -> None:
        self.reasoning = 0
        self.content = 0
        self.arguments: list[int] = []  # characters sent per call
        self.ids: list[str] = []

    def call_ids(self, count: int) -> list[str]:
        while len(self.ids) < count:
            self.ids.append(new_call_id())
        return self.ids

    def delta(self, snap: ChatSnapshot) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if snap.reasoning is not None and len(snap.reasoning) > self.reasoning:
            out["reasoning_content"] = snap.reasoning[self.reasoning :]
            self.reasoning = len(snap.reasoning)
        if len(snap.content) > self.content:
            out["content"] = snap.content[self.content :]
            self.content = len(snap.content)
        calls = []
        ids = self.call_ids(len(snap.calls))
        for i, call in enumerate(snap.calls):
            if i == len(self.arguments):
                calls.append(
                    {
                        "index": i,
                        "id": ids[i],
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    }
                )
                self.arguments.append(len(call.arguments))
            elif len(call.arguments) > self.arguments[i]:
                calls.append({"index": i, "function": {"arguments": call.arguments[self.arguments[i] :]}})
                self.arguments[i] = len(call.arguments)
        if calls:
            out["tool_calls"] = calls
        return out
