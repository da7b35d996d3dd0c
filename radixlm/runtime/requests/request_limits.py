"""Size limits of one request, beyond what the model itself allows (``request_validation``).

A request may not hold the server for minutes or feed the grammar compiler something that explodes
before it is even compiled: ``n``, the prompt length, the stop strings and the grammar inputs
(regex, JSON schema, choices) are bounded. The bounds come from ``ServerArgs`` (``--max-n``,
``--max-prompt-tokens``, ``--max-stop-strings``, ``--max-grammar-bytes``, ``--max-json-depth``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, TypeGuard

from radixlm.runtime.requests.json_bounds import InvalidJson, check_json_value, load_bounded_json
from radixlm.runtime.sampling.sampling_params import SamplingParams

MAX_STOP_CHARS = 1024  # one stop string
# NOTE: a counted repetition grows the automaton linearly in its count and nested ones multiply:
# "a{99999}" is 8 bytes yet took the scheduler down. Larger counts, in a regex or as a JSON schema's
# length bounds, are refused at the door.
MAX_GRAMMAR_REPEAT = 4096
_REPEAT = re.compile(r"\{\s*(\d+)\s*(?:,\s*(\d*)\s*)?\}")
_SCHEMA_COUNTS = ("maxLength", "minLength", "maxItems", "minItems", "maxProperties", "minProperties")


@dataclass(frozen=True)
class RequestLimits:
    """Per-request caps (defaults are ``ServerArgs``'s)."""

    max_n: int = 64
    max_prompt_tokens: int | None = None  # None: only the context length bounds it
    max_stop_strings: int = 32
    max_grammar_bytes: int = 64 << 10
    max_json_depth: int = 64

    @classmethod
    def from_server_args(cls, args: Any) -> RequestLimits:
        return cls(
            max_n=args.max_n,
            max_prompt_tokens=args.max_prompt_tokens,
            max_stop_strings=args.max_stop_strings,
            max_grammar_bytes=args.max_grammar_bytes,
            max_json_depth=args.max_json_depth,
        )


class LimitExceeded(ValueError):
    """A request over a limit; ``param`` names the field."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def check_sampling_limits(params: SamplingParams, limits: RequestLimits) -> None:
    """Raise ``LimitExceeded`` naming the first field over its limit."""
    if params.n > limits.max_n:
        raise LimitExceeded(f"n={params.n} is above this server's limit of {limits.max_n}", "n")
    if len(params.stop) > limits.max_stop_strings:
        raise LimitExceeded(
            f"{len(params.stop)} stop strings, at most {limits.max_stop_strings} allowed", "stop"
        )
    if any(len(s) > MAX_STOP_CHARS for s in params.stop):
        raise LimitExceeded(f"a stop string is longer than {MAX_STOP_CHARS} characters", "stop")
    check_grammar_input(params, limits)
    check_structural_tag_depth(params, limits)


def check_grammar_input(params: SamplingParams, limits: RequestLimits) -> None:
    """The grammar inputs' total size, and a JSON schema's nesting and numbers (finite only)."""
    size = sum(len(s.encode("utf-8", "surrogatepass")) for s in _grammar_strings(params))
    if size > limits.max_grammar_bytes:
        field = next(k for k in ("regex", "json_schema", "choices") if getattr(params, k) is not None)
        raise LimitExceeded(
            f"the {field} is {size} bytes, above this server's limit of {limits.max_grammar_bytes}", field
        )
    if isinstance(params.regex, str):
        counts = [int(c) for m in _REPEAT.finditer(params.regex) for c in m.groups() if c]
        if counts and max(counts) > MAX_GRAMMAR_REPEAT:
            raise LimitExceeded(
                f"the regex repeats {max(counts)} times, at most {MAX_GRAMMAR_REPEAT} allowed", "regex"
            )
    try:
        if params.json_schema is not None:
            _check_schema_counts(load_bounded_json(params.json_schema, limits.max_json_depth))
        for name in ("regex", "choices"):
            if getattr(params, name) is not None:
                check_json_value(getattr(params, name), limits.max_json_depth)
    except InvalidJson as e:
        field = "json_schema" if params.json_schema is not None else "regex"
        where = f" at {e.path}" if e.path else ""
        raise LimitExceeded(f"invalid {field}{where}: {e}", field) from e


def _grammar_strings(params: SamplingParams) -> list[str]:
    out = [s for s in (params.regex, params.json_schema) if isinstance(s, str)]
    return out + [c for c in params.choices or [] if isinstance(c, str)]


def _check_schema_counts(schema: Any) -> None:
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key in _SCHEMA_COUNTS:
                value = node.get(key)
                if _is_number(value) and value > MAX_GRAMMAR_REPEAT:
                    raise LimitExceeded(
                        f"json_schema {key}={value} is above {MAX_GRAMMAR_REPEAT}", "json_schema"
                    )
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def _is_number(x: object) -> TypeGuard[int | float]:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def check_structural_tag_depth(params: SamplingParams, limits: RequestLimits) -> None:
    """A ``structural_tag`` is JSON text parsed later by the scheduler: bound its nesting here."""
    if isinstance(params.structural_tag, str):
        try:
            load_bounded_json(params.structural_tag, limits.max_json_depth)
        except InvalidJson as e:
            where = f" at {e.path}" if e.path else ""
            raise LimitExceeded(f"invalid structural_tag{where}: {e}", "structural_tag") from e
