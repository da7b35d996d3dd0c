"""Hypothesis strategies for the hostile request classes of issue 27, shared by the fuzzers
(``test_fuzz_http.py``, ``test_schemathesis.py``, ``test_fuzz_engine.py``): deep grammars,
backtracking patterns, nested counted repeats, large logprob products, malformed tool-call history
and oversize ids. Sizes straddle the server's limits (``request_limits.py``), so both sides of each
limit are drawn."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st


# ---- deep grammars: long chains of rule references, many rules, deep nesting of groups -------------
def rule_chain(n: int) -> str:
    """An EBNF grammar whose rules reference each other ``n`` deep."""
    return "root ::= r0\n" + "".join(f'r{i} ::= r{i + 1} "a"\n' for i in range(n)) + f'r{n} ::= "b"'


def nested_group(n: int, bracket: str = "(") -> str:
    return "root ::= " + bracket * n + '"a"' + {"(": ")", "[": "]"}[bracket] * n


rule_chains = st.integers(1, 4000).map(rule_chain)
many_rules = st.integers(1, 3000).map(
    lambda n: (
        "root ::= "
        + " | ".join(f"r{i}" for i in range(n))
        + "\n"
        + "".join(f'r{i} ::= "{i}"\n' for i in range(n))
    )
)
nested_groups = st.builds(nested_group, st.integers(1, 3000), st.sampled_from(["(", "["]))
deep_ebnf = st.one_of(rule_chains, many_rules, nested_groups)

# ---- backtracking patterns: nested quantifiers over overlapping atoms --------------------------------
_atoms = st.sampled_from(["a", "x", ".", "aa", "a|aa", "x?x", "\\w"])
backtracking = st.recursive(
    _atoms,
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from("+*")).map(lambda t: f"({t[0]}){t[1]}"),
        st.tuples(inner, inner).map(lambda t: f"({t[0]}|{t[1]})"),
        st.tuples(inner, inner).map(lambda t: t[0] + t[1]),
    ),
    max_leaves=6,
).map(lambda r: f"({r})+y")

# ---- nested counted repeats: counts multiply (regex, a schema's pattern, its length bounds) ----------
_count = st.one_of(st.integers(0, 40), st.integers(900, 5000))
nested_repeats = st.recursive(
    st.sampled_from(["a", "[a-z]", "(ab|c)"]),
    lambda inner: st.one_of(
        st.tuples(inner, _count).map(lambda t: f"({t[0]}){{{t[1]}}}"),
        st.tuples(inner, _count, _count).map(lambda t: f"({t[0]}){{{min(t[1:])},{max(t[1:])}}}"),
    ),
    max_leaves=4,
)


def _schema(pattern: str, length: int, depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string", "pattern": pattern, "maxLength": length}
    for _ in range(depth):
        schema = {"type": "array", "items": schema, "maxItems": length}
    return schema


repeat_schemas = st.builds(_schema, nested_repeats, _count, st.integers(0, 4)).map(json.dumps)

# ---- top logprobs over the prompt: alternatives times positions ------------------------------------
logprob_requests = st.fixed_dictionaries(
    {
        "text": st.integers(1, 230).map(lambda n: "ab" * n),
        "return_logprob": st.just(True),
        "top_logprobs_num": st.one_of(st.integers(0, 25), st.integers(25, 50_000)),
        "logprob_start_len": st.integers(-1, 240),
        "sampling_params": st.fixed_dictionaries({"max_new_tokens": st.integers(1, 3)}),
    }
)
openai_logprobs = st.fixed_dictionaries(
    {
        "logprobs": st.integers(0, 30),
        "echo": st.booleans(),
        "prompt": st.integers(1, 200).map(lambda n: "ab" * n),
    }
)

# ---- malformed tool-call history --------------------------------------------------------------------
_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.text(max_size=8))
_deep_arguments = st.integers(1, 3000).map(lambda d: '{"a": ' * d + "1" + "}" * d)
_function = st.fixed_dictionaries(
    {},
    optional={
        "name": st.one_of(_scalars, st.just("get_weather")),
        "arguments": st.one_of(_scalars, _deep_arguments, st.just('{"city": "x"}'), st.just("{not json")),
    },
)
tool_calls = st.one_of(
    _scalars,
    st.lists(
        st.fixed_dictionaries(
            {}, optional={"id": _scalars, "type": _scalars, "function": st.one_of(_scalars, _function)}
        ),
        max_size=3,
    ),
)
tool_histories = st.builds(
    lambda calls, answer: [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "content": answer, "tool_call_id": "call-0"},
        {"role": "user", "content": "thanks"},
    ],
    tool_calls,
    st.one_of(st.text(max_size=8), st.none()),
)

# ---- oversize ids -----------------------------------------------------------------------------------
oversize_ids = st.one_of(
    st.integers(200, 300).map(lambda n: "r" * n),
    st.integers(1, 6).map(lambda k: "r" * 10**k),
    st.sampled_from(["a\nb", "", " ", "\u0000", "id\u202e"]),
)
