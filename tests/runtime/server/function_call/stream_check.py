"""Feed an output to a reader in pieces and assemble the OpenAI deltas as the openai client does."""

from __future__ import annotations

from typing import Any

from radixlm.runtime.server.function_call.streaming import ChatOutputReader, DeltaTracker, message


def assemble(deltas: list[dict[str, Any]]) -> dict[str, Any]:
    """The message the deltas add up to (content, reasoning_content, tool calls by index)."""
    content, reasoning, calls = "", "", {}
    for d in deltas:
        content += d.get("content") or ""
        reasoning += d.get("reasoning_content") or ""
        for c in d.get("tool_calls", []):
            call = calls.setdefault(c["index"], {"id": None, "name": "", "arguments": ""})
            call["id"] = c.get("id") or call["id"]
            call["name"] += c.get("function", {}).get("name") or ""
            call["arguments"] += c.get("function", {}).get("arguments") or ""
    return {
        "content": content,
        "reasoning": reasoning,
        "calls": [(calls[i]["name"], calls[i]["arguments"]) for i in sorted(calls)],
        "ids": [calls[i]["id"] for i in sorted(calls)],
    }


def streamed(reader: ChatOutputReader, text: str, cuts: list[int]) -> dict[str, Any]:
    tracker = DeltaTracker()
    deltas = [tracker.delta(reader.read(text[:k], final=False)) for k in cuts]
    deltas.append(tracker.delta(reader.read(text, final=True)))
    return assemble(deltas)


def whole(reader: ChatOutputReader, text: str) -> dict[str, Any]:
    snap = reader.read(text, final=True)
    msg = message(snap, [f"id{i}" for i in range(len(snap.calls))])
    return {
        "content": msg["content"] or "",
        "reasoning": msg.get("reasoning_content") or "",
        "calls": [(c["function"]["name"], c["function"]["arguments"]) for c in msg.get("tool_calls", [])],
    }


def check_every_split(reader: ChatOutputReader, text: str) -> dict[str, Any]:
    """Streams cut at every point (one cut, and character by character) equal the whole answer."""
    expected = whole(reader, text)
    for k in range(len(text) + 1):
        got = streamed(reader, text, [k])
        assert {key: got[key] for key in expected} == expected, f"split at {k}: {text[:k]!r}"
    by_char = streamed(reader, text, list(range(len(text) + 1)))
    assert {key: by_char[key] for key in expected} == expected
    assert all(by_char["ids"]) and len(set(by_char["ids"])) == len(by_char["ids"])
    return expected
