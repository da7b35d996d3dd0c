"""Reasoning parsers (``--reasoning-parser``): a model's ``<think>...</think>`` split from its answer.

- ``deepseek-r1``: the output starts inside the thinking (its template opens ``<think>`` in the
  prompt; a ``<think>`` the model writes itself is dropped); no ``</think>``: all of it is thinking.
- ``qwen3``: thinking only when the output opens ``<think>``; otherwise it is all answer (e.g. the
  template's ``enable_thinking=False``).

Shared by the server (``--reasoning-parser``) and the language (``separate_reasoning``). Like the
server's tool parsers, splits of a growing output are monotone (both parts only grow), so a stream
sends their differences and they add up to the split of the finished output.
"""

from __future__ import annotations

from dataclasses import dataclass

THINK_START, THINK_END = "<think>", "</think>"
REASONING_PARSERS = ("deepseek-r1", "qwen3")


@dataclass
class ReasoningSplit:
    reasoning: str
    answer: str


class ReasoningParser:
    def __init__(self, name: str) -> None:
        if name not in REASONING_PARSERS:
            known = ", ".join(REASONING_PARSERS)
            raise ValueError(f"unknown reasoning parser {name!r} (expected one of: {known})")
        self.name = name
        self.starts_thinking = name == "deepseek-r1"
        self.end = THINK_END

    def split(self, text: str, final: bool) -> ReasoningSplit:
        """Thinking and answer of ``text``; ``final`` False: hold back what may be a partial tag."""
        body = text.lstrip()
        if body.startswith(THINK_START):
            body = body[len(THINK_START) :]
        elif not final and THINK_START.startswith(body):
            return ReasoningSplit("", "")
        elif not self.starts_thinking:
            return ReasoningSplit("", text)
        close = body.find(THINK_END)
        if close < 0:
            hold = 0 if final else partial_suffix(body, THINK_END)
            thinking = body[: len(body) - hold]
            return ReasoningSplit(thinking.strip(), "")
        answer = body[close + len(THINK_END) :].lstrip()
        return ReasoningSplit(body[:close].strip(), answer)


def partial_suffix(text: str, marker: str) -> int:
    """The length of the longest end of ``text`` that begins ``marker`` (text to hold back)."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0


def get_reasoning_parser(name: str | None) -> ReasoningParser | None:
    return None if name in (None, "none") else ReasoningParser(name)


def separate_reasoning(text: str, parser_name: str) -> tuple[str, str]:
    """(reasoning, answer) of a finished output (the native API's ``/separate_reasoning``, the
    language's ``separate_reasoning``)."""
    split = ReasoningParser(parser_name).split(text, final=True)
    return split.reasoning, split.answer
