"""Size limits of one request, beyond what the model itself allows (``request_validation``).

A request may not hold the server for minutes or feed the grammar compiler something that explodes
before it is even compiled: ``n``, the prompt length, the stop strings, the grammar inputs (regex,
JSON schema, choices, ebnf, structural tag) and the top logprobs are bounded. The bounds come from
``ServerArgs`` (``--max-n``,
``--max-prompt-tokens``, ``--max-stop-strings``, ``--max-grammar-bytes``, ``--max-json-depth``,
``--max-top-logprobs``, ``--max-logprob-entries``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeGuard

from radixlm.runtime.requests.ebnf_structure import grammar_shape
from radixlm.runtime.requests.json_bounds import InvalidJson, check_json_value, load_bounded_json
from radixlm.runtime.requests.regex_repeats import repeat_cost
from radixlm.runtime.sampling.sampling_params import SamplingParams

MAX_STOP_CHARS = 1024  # one stop string
# NOTE: a counted repetition grows the automaton linearly in its count and nested ones multiply:
# "a{99999}" is 8 bytes yet took the scheduler down, and "(a{999}){999}" cost 400 MB. The product of
# nested counts (in a regex, a JSON schema's `pattern`, or as a schema's length bounds) and the size
# of the regex with every count unrolled are refused above these at the door (regex_repeats.py).
MAX_GRAMMAR_REPEAT = 4096
MAX_GRAMMAR_EXPANSION = 1 << 17
# NOTE: llguidance recurses once per rule on a chain of references: ~3000 overflowed its native stack
# and killed the scheduler (ebnf_structure.py). These leave a wide margin; real grammars use dozens.
MAX_GRAMMAR_RULES = 1024
MAX_GRAMMAR_RULE_DEPTH = 256
MAX_GRAMMAR_NESTING = 64
_GRAMMAR_FIELDS = ("regex", "json_schema", "choices", "ebnf", "structural_tag")
_SCHEMA_COUNTS = ("maxLength", "minLength", "maxItems", "minItems", "maxProperties", "minProperties")


@dataclass(frozen=True)
class RequestLimits:
    """Per-request caps (defaults are ``ServerArgs``'s)."""

    max_n: int = 64
    max_prompt_tokens: int | None = None  # None: only the context length bounds it
    max_stop_strings: int = 32
    max_grammar_bytes: int = 64 << 10
    max_json_depth: int = 64
    max_top_logprobs: int = 20
    max_logprob_entries: int = 1 << 20

    @classmethod
    def from_server_args(cls, args: Any) -> RequestLimits:
        return cls(
            max_n=args.max_n,
            max_prompt_tokens=args.max_prompt_tokens,
            max_stop_strings=args.max_stop_strings,
            max_grammar_bytes=args.max_grammar_bytes,
            max_json_depth=args.max_json_depth,
            max_top_logprobs=args.max_top_logprobs,
            max_logprob_entries=args.max_logprob_entries,
        )


class LimitExceeded(ValueError):
    """A request over a limit; ``param`` names the field."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def check_logprob_limits(
    prompt_len: int, start: int, top: int, new_tokens: int, limits: RequestLimits
) -> None:
    """``top`` alternatives at each position returned: prompt positions from ``start`` (-1: none)
    and ``new_tokens`` (at most what the context leaves). Each alternative costs memory in three
    processes and bytes in the reply (the whole vocabulary over a 60-token prompt: a 97 MB body)."""
    if top > limits.max_top_logprobs:
        raise LimitExceeded(
            f"top_logprobs_num={top} is above this server's limit of {limits.max_top_logprobs}",
            "top_logprobs_num",
        )
    positions = (prompt_len - start if start >= 0 else 0) + new_tokens
    if top * positions > limits.max_logprob_entries:
        raise LimitExceeded(
            f"top_logprobs_num={top} over {positions} positions (prompt from logprob_start_len, plus "
            f"the new tokens max_new_tokens and the context allow) is {top * positions} top logprobs, "
            f"above this server's limit of {limits.max_logprob_entries} (max_logprob_entries)",
            "top_logprobs_num",
        )


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
        field = next(k for k in _GRAMMAR_FIELDS if getattr(params, k) is not None)
        raise LimitExceeded(
            f"the {field} is {size} bytes, above this server's limit of {limits.max_grammar_bytes}", field
        )
    if isinstance(params.regex, str):
        check_regex_repeats(params.regex, "regex", "the regex")
    if isinstance(params.ebnf, str):
        check_ebnf_shape(params.ebnf)
    try:
        for name in ("json_schema", "structural_tag"):
            if isinstance(getattr(params, name), str):
                _check_schema_counts(load_bounded_json(getattr(params, name), limits.max_json_depth), name)
        for name in ("regex", "choices"):
            if getattr(params, name) is not None:
                check_json_value(getattr(params, name), limits.max_json_depth)
    except InvalidJson as e:
        field = next(k for k in ("json_schema", "structural_tag", "regex") if getattr(params, k) is not None)
        where = f" at {e.path}" if e.path else ""
        raise LimitExceeded(f"invalid {field}{where}: {e}", field) from e


def check_ebnf_shape(text: str) -> None:
    """``LimitExceeded`` when an ``ebnf`` grammar has too many rules, too long a chain of rule
    references or too deep a nesting of groups, before any native library parses it."""
    shape = grammar_shape(text)
    for value, limit, what in (
        (shape.rules, MAX_GRAMMAR_RULES, "rules"),
        (shape.depth, MAX_GRAMMAR_RULE_DEPTH, "rules in one chain of rule references"),
        (shape.nesting, MAX_GRAMMAR_NESTING, "levels of nested groups in one rule"),
    ):
        if value > limit:
            raise LimitExceeded(f"the ebnf grammar has {value} {what}, at most {limit} allowed", "ebnf")


def check_regex_repeats(regex: str, param: str, what: str) -> None:
    """``LimitExceeded`` when ``regex``'s nested counts multiply above ``MAX_GRAMMAR_REPEAT`` or its
    unrolled size is above ``MAX_GRAMMAR_EXPANSION``."""
    product, expanded = repeat_cost(regex)
    if product > MAX_GRAMMAR_REPEAT:
        raise LimitExceeded(
            f"{what} repeats {product} times (the product of nested counted repeats), "
            f"at most {MAX_GRAMMAR_REPEAT} allowed",
            param,
        )
    if expanded > MAX_GRAMMAR_EXPANSION:
        raise LimitExceeded(
            f"{what} is {expanded} characters long with its counted repeats unrolled, "
            f"at most {MAX_GRAMMAR_EXPANSION} allowed",
            param,
        )


def _grammar_strings(params: SamplingParams) -> list[str]:
    texts = (params.regex, params.json_schema, params.ebnf, params.structural_tag)
    out = [s for s in texts if isinstance(s, str)]
    return out + [c for c in params.choices or [] if isinstance(c, str)]


def _check_schema_counts(schema: Any, field: str) -> None:
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key in _SCHEMA_COUNTS:
                value = node.get(key)
                if _is_number(value) and value > MAX_GRAMMAR_REPEAT:
                    raise LimitExceeded(f"{field} {key}={value} is above {MAX_GRAMMAR_REPEAT}", field)
            pattern = node.get("pattern")
            if isinstance(pattern, str):
                check_regex_repeats(pattern, field, f"{field} pattern {pattern[:40]!r}")
            for key in node.get("patternProperties") or {}:
                if isinstance(key, str):
                    check_regex_repeats(key, field, f"{field} patternProperties {key[:40]!r}")
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
