"""The outlines-core compile worker: a separate process, so a runaway compile can be killed.

Run as ``python -m radixlm.runtime.constrained.outlines.compile_worker`` (a plain subprocess: the
scheduler may itself be a daemonic process, which multiprocessing forbids to have children). It imports
only what compiling needs (no torch), reads the vocabulary once, then answers ``(kind, text,
whitespace_pattern)`` frames with ``("ok", regex, index, fsm)`` or ``("error", message)``. Frames are
pickles behind an 8-byte length, on stdin/stdout.
"""

from __future__ import annotations

import pickle
import struct
import sys
from typing import IO, Any

from outlines_core import Index, Vocabulary

from radixlm.runtime.constrained.outlines.grammar_regex import grammar_to_regex
from radixlm.runtime.constrained.outlines.regex_fsm import RegexFSM

_HEADER = struct.Struct("<Q")


def write_frame(stream: IO[bytes], obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def read_frame(stream: IO[bytes]) -> Any:
    """The next object; ``EOFError`` when the other side is gone."""
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError("compile worker pipe closed")
    (size,) = _HEADER.unpack(header)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("compile worker pipe closed")
    return pickle.loads(data)


def compile_outlines(kind: str, text: str, whitespace_pattern: str, vocab: Vocabulary) -> tuple:
    """``(regex, index, fsm)`` for one grammar (``ValueError`` when it is not supported)."""
    regex = grammar_to_regex(kind, text, whitespace_pattern)
    index = Index(regex, vocab)
    return regex, index, RegexFSM.try_build(regex)


def main() -> None:
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing else may write to the reply pipe
    try:
        eos_token_id, byte_map = read_frame(requests)
    except EOFError:  # the parent shut down before the worker started
        return
    vocab = Vocabulary(eos_token_id, byte_map)
    while True:
        try:
            kind, text, whitespace_pattern = read_frame(requests)
        except EOFError:
            return
        try:
            reply = ("ok", *compile_outlines(kind, text, whitespace_pattern, vocab))
        except Exception as e:  # noqa: BLE001 - any compile failure is reported to the parent
            reply = ("error", str(e) if isinstance(e, ValueError) else f"{type(e).__name__}: {e}")
        write_frame(replies, reply)


if __name__ == "__main__":
    main()
