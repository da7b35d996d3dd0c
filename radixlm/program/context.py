"""A program's model context: what the model sees, as text pieces and runs of token ids.

Token-exact continuation: what a ``gen`` produced enters the context as the token ids the model
generated, never as its text tokenized again, so the next request of the program (interpreter or
compiled graph, same rules) continues exactly the sequence whose KV the radix cache holds.

A context is a list of segments ``{"text": str}`` or ``{"ids": [int, ...]}`` (the native
``/generate`` field ``input_segments``). Adjacent text merges into one segment, so the program's
constant text is tokenized in one piece as before. A runtime tokenizes each text segment on its own,
without special tokens, and concatenates the segments' ids.

Segments are never mutated once in a list (appending replaces the last one), so a fork can copy
its parent's context with ``list(context)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Segment = dict[str, Any]
Context = list[Segment]


def append_text(context: Context, text: str) -> None:
    """Append ``text``, merged into a trailing text segment."""
    if not text:
        return
    if context and "text" in context[-1]:
        context[-1] = {"text": context[-1]["text"] + text}
    else:
        context.append({"text": text})


def append_ids(context: Context, ids: list[int]) -> None:
    """Append token ids, merged into a trailing ids segment."""
    if not ids:
        return
    if context and "ids" in context[-1]:
        context[-1] = {"ids": context[-1]["ids"] + list(ids)}
    else:
        context.append({"ids": list(ids)})


def extend(context: Context, segments: Context) -> None:
    """Append each of ``segments`` (merging as ``append_text``/``append_ids`` do)."""
    for seg in segments:
        if "text" in seg:
            append_text(context, seg["text"])
        else:
            append_ids(context, seg["ids"])


def with_text(context: Context, text: str) -> Context:
    """A copy of ``context`` with ``text`` appended."""
    out = list(context)
    append_text(out, text)
    return out


def continuation(resp: dict[str, Any], options: dict[str, Any]) -> Context:
    """The segments a finished ``gen`` response adds to its context.

    - The output ids as generated (length limit, grammar end, a stop string with ``no_stop_trim``).
    - A matched stop token (EOS or ``stop_token_ids``) is left out, as it is left out of the text:
      the program appends its own turn end after a gen, and the context must not hold it twice.
    - A matched stop string is cut from the text but its tokens are in ``output_ids`` (and a token
      may hold text on both sides of it): the cut text is used instead, tokenized on its own.
    - No ``output_ids`` (OpenAI-compatible APIs): the text.
    """
    text = resp.get("text", "")
    ids = resp.get("output_ids")
    if ids is None:
        return [{"text": text}] if text else []
    reason = resp.get("meta_info", {}).get("finish_reason") or {}
    matched = reason.get("matched") if reason.get("type") == "stop" else None
    if not options.get("no_stop_trim"):
        if isinstance(matched, str) and matched:
            return [{"text": text}] if text else []
        if isinstance(matched, int) and ids and ids[-1] == matched:
            ids = ids[:-1]
    return [{"ids": list(ids)}] if ids else []


def as_text(context: Context, backend: str) -> str:
    """The context as one string, for text-only APIs (which never return token ids)."""
    if any("ids" in seg for seg in context):
        raise ValueError(f"{backend} cannot take token ids in a prompt")
    return "".join(seg["text"] for seg in context)


def to_ids(context: Context, encode: Callable[[str], list[int]]) -> list[int]:
    """The context's token ids: each text segment encoded on its own (``encode`` adds no special
    tokens), the ids segments as they are."""
    ids: list[int] = []
    for seg in context:
        ids.extend(encode(seg["text"]) if "text" in seg else seg["ids"])
    return ids


def is_batch(input_segments: list[Any] | None) -> bool:
    """Whether an ``input_segments`` value holds several prompts (a list of contexts)."""
    return bool(input_segments and isinstance(input_segments[0], list))
