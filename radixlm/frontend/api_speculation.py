"""API speculative execution: SGLang's ``@function(num_api_spec_tokens=N)`` for remote-API backends.

A remote API (``OpenAI``) has no prefix cache we control, so every ``gen`` resends the whole prompt.
With ``num_api_spec_tokens`` one request generates ahead and several gens are filled from its output:

- Chat models: inside an assistant turn, the turn's fixed text and gens are held back. When the turn
  ends, one request asks for ``N`` tokens (sampling options of the turn's gens, which must agree; no
  stop strings) and the gens are filled by matching the turn's fixed text in the output: a gen ends
  at its first stop string (the stop string stays in the output, for the next fixed text to match),
  or, without stop strings, where the next fixed text starts; the last gen takes the rest. When the
  fixed text does not match, the request is repeated (``MAX_TRIES`` in all); then the gens matched
  so far keep their text and the others are empty, as in SGLang, with a warning.
- Completion models: a gen that finds no speculated text asks for ``max(max_tokens, N)`` tokens
  without stop strings and keeps what runs past its own stop as speculated text; the program's next
  fixed text is checked against it (a mismatch drops it), and the next gen takes its text from it.
  As in SGLang, a gen without stop strings then takes ``max_tokens`` *characters*.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from radixlm.frontend.backends.base import Backend

#: Requests per assistant turn before the output is used as it matched.
MAX_TRIES = 3
#: Options that belong to one gen, not to the turn's shared request.
_PER_GEN = ("max_new_tokens", "stop", "stop_regex")

#: Sends one generation with these request options; returns ``(text, meta_info)``.
Generate = Callable[[dict[str, Any]], tuple[str, dict[str, Any]]]


@dataclass
class Piece:
    """Fixed text of the turn (``is_gen`` False), or a gen whose ``text`` is filled by matching."""

    text: str
    is_gen: bool = False
    name: str | None = None
    stops: tuple[str, ...] = ()


def speculation(
    backend: Backend | None, num_tokens: int | None, stream: bool
) -> tuple[int | None, CompletionSpeculation | None]:
    """For one program state: the tokens of an assistant turn held back (a chat API), or the completion
    model's speculation. Only backends with ``api_speculation`` (remote APIs) speculate; the others
    keep their prefix cache and ignore ``num_api_spec_tokens``."""
    if not num_tokens or backend is None or not backend.api_speculation:
        return None, None
    if stream:
        raise ValueError("stream=True does not work with num_api_spec_tokens (nor in SGLang)")
    if backend.chat_mode:
        return num_tokens, None
    return None, CompletionSpeculation(num_tokens)


def first_output(resp: Any) -> tuple[str, dict[str, Any]]:
    """``(text, meta_info)`` of a /generate response (the first sample's when ``n > 1``)."""
    resp = resp[0] if isinstance(resp, list) else resp
    return resp["text"], resp.get("meta_info", {})


def _stops(options: dict[str, Any]) -> tuple[str, ...]:
    stop = options.get("stop")
    if stop is None:
        return ()
    return (stop,) if isinstance(stop, str) else tuple(s for s in stop if s)


def _first(text: str, needles: tuple[str, ...]) -> int:
    """The earliest position of any of ``needles`` in ``text``; -1 if none occurs."""
    found = [p for p in (text.find(n) for n in needles) if p != -1]
    return min(found) if found else -1


def match_turn(pieces: list[Piece], output: str) -> bool:
    """Fill the gens of ``pieces`` from ``output``; False when the fixed text does not match (the gens
    before the mismatch keep what they matched)."""
    rest = output
    for i, piece in enumerate(pieces):
        if not piece.is_gen:
            if not rest.startswith(piece.text):
                return False
            rest = rest[len(piece.text) :]
            continue
        following = pieces[i + 1] if i + 1 < len(pieces) else None
        fixed_next = following is not None and not following.is_gen and following.text
        ends = piece.stops or ((following.text,) if following is not None and fixed_next else ())
        end = _first(rest, ends) if ends else -1
        if end == -1:
            if following is not None:
                return False
            end = len(rest)
        piece.text, rest = rest[:end], rest[end:]
    return True


class ChatTurn:
    """The held-back pieces of one assistant turn of a chat model."""

    def __init__(self, num_tokens: int) -> None:
        self.num_tokens = num_tokens
        self.pieces: list[Piece] = []
        self.options: dict[str, Any] | None = None

    def fill(self, text: str) -> None:
        if text:
            self.pieces.append(Piece(text))

    def add_gen(self, name: str | None, options: dict[str, Any]) -> None:
        shared = {k: v for k, v in options.items() if k not in _PER_GEN}
        if self.options is None:
            self.options = shared
        elif shared != self.options:
            raise ValueError(
                "the gens of one assistant turn under num_api_spec_tokens must share their sampling "
                f"options (one request generates them all): {self.options} vs {shared}"
            )
        self.pieces.append(Piece("", is_gen=True, name=name, stops=_stops(options)))

    def resolve(self, generate: Generate) -> tuple[list[Piece], dict[str, Any]]:
        """Generate the turn (up to ``MAX_TRIES`` requests) and return its filled pieces."""
        if self.options is None:  # no gen in the turn: nothing to generate
            return self.pieces, {}
        options = {**self.options, "max_new_tokens": self.num_tokens}
        pieces: list[Piece] = []
        meta: dict[str, Any] = {}
        for attempt in range(1, MAX_TRIES + 1):
            pieces = copy.deepcopy(self.pieces)
            output, meta = generate(options)
            if match_turn(pieces, output):
                return pieces, {**meta, "api_spec_requests": attempt}
        warnings.warn(
            f"num_api_spec_tokens: {MAX_TRIES} outputs did not follow the assistant turn's fixed text; "
            "its gens keep what matched (the others are empty)",
            stacklevel=2,
        )
        return pieces, {**meta, "api_spec_requests": MAX_TRIES, "api_spec_matched": False}


class CompletionSpeculation:
    """Text a completion model generated past the current gen, for the next gens to take."""

    def __init__(self, num_tokens: int) -> None:
        self.num_tokens = num_tokens
        self.text = ""

    def fill(self, text: str) -> None:
        """The program appended ``text``: keep the speculated text only if it continues the same way."""
        self.text = self.text[len(text) :] if self.text.startswith(text) else ""

    def gen(self, options: dict[str, Any], generate: Generate) -> tuple[str, dict[str, Any]]:
        """The value of one gen, from the speculated text or a new request that refills it."""
        stops = _stops(options)
        max_chars = int(options.get("max_new_tokens") or 0)
        meta: dict[str, Any] = {}
        if (not stops and len(self.text) < max_chars) or (stops and not self.text):
            ahead = {**options, "max_new_tokens": max(max_chars, self.num_tokens), "stop": None}
            self.text, meta = generate(ahead)
        end = _first(self.text, stops) if stops else -1
        if end == -1:
            end = min(max_chars, len(self.text))
        value, self.text = self.text[:end], self.text[end:]
        return value, meta
