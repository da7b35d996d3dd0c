"""The grammar worker: a separate process, so a runaway compile can be killed and a crash kills only it.

Run as ``python -m radixlm.runtime.constrained.outlines.compile_worker`` (a plain subprocess: the
scheduler may itself be a daemonic process, which multiprocessing forbids to have children). It imports
only what compiling needs (no torch), reads ``(eos_token_id, byte_map, memory_bytes)`` once (its address
space is capped at ``memory_bytes``), then answers ``(op, *args)`` frames with ``("ok", *result)`` or
``("error", message)``. Ops: ``compile`` (``kind, text, whitespace_pattern`` -> outlines-core's
``regex, index, fsm``), ``check_regex`` (``regex``: can outlines-core compile it) and
``llguidance_grammar`` (``kind, text, whitespace_pattern`` -> llguidance's grammar text, built and
fully checked: GBNF conversion is slow Python, and llguidance's check recurses per rule and may
overflow the native stack). Frames are pickles behind an 8-byte length, on stdin/stdout.
"""

from __future__ import annotations

import pickle
import resource
import struct
import sys
from collections.abc import Callable
from typing import IO, Any

from outlines_core import Index, Vocabulary

from radixlm.runtime.constrained.outlines.grammar_regex import check_regex, grammar_to_regex
from radixlm.runtime.constrained.outlines.regex_fsm import RegexFSM

_HEADER = struct.Struct("<Q")


def write_frame(stream: IO[bytes], obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def read_frame(stream: IO[bytes]) -> Any:
    """The next object; ``EOFError`` when the other side is gone."""
    return read_sized_frame(stream)[0]


def read_sized_frame(stream: IO[bytes]) -> tuple[Any, int]:
    """The next object and its size as a frame (bytes); ``EOFError`` when the other side is gone."""
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError("compile worker pipe closed")
    (size,) = _HEADER.unpack(header)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("compile worker pipe closed")
    return pickle.loads(data), size


def compile_outlines(kind: str, text: str, whitespace_pattern: str, vocab: Vocabulary) -> tuple:
    """``(regex, index, fsm)`` for one grammar (``ValueError`` when it is not supported)."""
    regex = grammar_to_regex(kind, text, whitespace_pattern)
    index = Index(regex, vocab)
    return regex, index, RegexFSM.try_build(regex)


def llguidance_grammar(kind: str, text: str, whitespace_pattern: str) -> tuple:
    """``(grammar,)``: llguidance's grammar for ``(kind, text)`` once its full check (as a compile
    does) accepts it; else ``ValueError``."""
    # NOTE: imported only by workers asked for an llguidance grammar
    import llguidance

    from radixlm.runtime.constrained.llguidance.grammar_text import llg_grammar

    grammar = llg_grammar(kind, text, whitespace_pattern)
    error = llguidance.LLMatcher.validate_grammar(grammar)
    if error:
        lines = [line.strip() for line in error.splitlines() if line.strip()]
        raise ValueError(next((ln for ln in lines if ln.startswith("error:")), lines[0])[:300])
    return (grammar,)


def _ops(vocab: Vocabulary) -> dict[str, Callable[..., tuple]]:
    def check(regex: str) -> tuple:
        check_regex(regex)
        return ()

    return {
        "compile": lambda kind, text, ws: compile_outlines(kind, text, ws, vocab),
        "check_regex": check,
        "llguidance_grammar": llguidance_grammar,
    }


def main() -> None:
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing else may write to the reply pipe
    try:
        eos_token_id, byte_map, memory_bytes = read_frame(requests)
    except EOFError:  # the parent shut down before the worker started
        return
    if memory_bytes:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    ops = _ops(Vocabulary(eos_token_id, byte_map))
    write_frame(replies, ("ready",))
    while True:
        try:
            op, *args = read_frame(requests)
        except EOFError:
            return
        try:
            reply = ("ok", *ops[op](*args))
        except Exception as e:  # noqa: BLE001 - any compile failure is reported to the parent
            reply = ("error", str(e) if isinstance(e, ValueError) else f"{type(e).__name__}: {e}")
        write_frame(replies, reply)


if __name__ == "__main__":
    main()
