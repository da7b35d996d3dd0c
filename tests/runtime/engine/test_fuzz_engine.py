"""Property-based tests of the Engine's sampling parameters and grammars (hypothesis), on the tiny model.

- Any sampling parameters: a ``ValueError`` naming a parameter given, or an output that keeps the
  limits asked for; a seeded request gives the same tokens twice.
- Generated regexes and the same languages written as EBNF: a finished output matches them, under
  random sampling settings (penalties, top-k/p, min-p, logit biases against the allowed tokens).
- Choices: the output is one of them. Generated JSON schemas: a finished output validates.
- Arbitrary grammar text and the hostile classes of issue 27 (deep grammars, nested counted repeats
  in a regex or a schema, backtracking ``stop_regex``, ``min_new_tokens`` past a grammar's end):
  refused with a ``ValueError`` or served; the engine keeps serving.
The root conftest checks every KV slot came back after each test. Derandomized and bounded.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from radixlm.runtime.sampling.param_rules import NUMBER_RULES
from tests.helpers import hostile_strategies as hs
from tests.helpers.engines import make_engine

VOCAB = 320  # the tiny model's
SETTINGS = settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
GRAMMAR_TOKENS = 48  # more than the longest generated language's strings (18 characters)


@pytest.fixture(scope="module")
def engine(tiny_llama_dir):
    engine = make_engine(tiny_llama_dir, context_length=256)
    yield engine
    engine.shutdown()


def alive(engine) -> None:
    out = engine.generate("still there?", {"temperature": 0, "max_new_tokens": 2, "ignore_eos": True})
    assert out["meta_info"]["completion_tokens"] == 2


# ---- sampling parameters -----------------------------------------------------------------------
hostile = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from([float("nan"), float("inf"), -1e-300, 1e300, 2**64, -(2**64), "1", [], {}]),
)


def number(name: str) -> st.SearchStrategy:
    rule = NUMBER_RULES[name]
    low = rule.minimum if rule.minimum is not None else -3
    high = rule.maximum if rule.maximum is not None else 3
    inside = (
        st.integers(int(low), int(high) + 3)
        if rule.integer
        else st.floats(low, high, exclude_min=rule.exclusive_minimum)
    )
    return st.one_of(inside, st.sampled_from(rule.also or [low]), st.floats(-5, 5), hostile)


# Issue 27: patterns Python's re backtracks on (or RE2 cannot run), nested counted repeats that
# multiply, and rule chains deep enough to overflow llguidance's stack.
backtracking = st.sampled_from(
    [r"(x+x+)+y", r"(a|aa)+b", r"(\w+\s?)*!", r"((ab)*|a)*c", r"(a)\1", r"(?=a)b", r"(?<!a)b", "a" * 2000]
)
nested_repeats = st.lists(st.integers(1, 300), min_size=1, max_size=3).map(
    lambda counts: functools.reduce(lambda inner, c: f"(?:{inner}){{{c}}}", counts, "[ab]")
)
rule_chains = st.integers(1, 600).map(
    lambda n: "root ::= r0\n" + "".join(f'r{i} ::= r{i + 1} "x"\n' for i in range(n)) + f'r{n} ::= "y"\n'
)

sampling = st.fixed_dictionaries(
    {"max_new_tokens": st.one_of(st.integers(0, 6), hostile)},
    optional={
        **{name: number(name) for name in NUMBER_RULES if name not in ("max_new_tokens", "n")},
        "n": st.one_of(st.integers(1, 3), hostile),
        "stop": st.one_of(st.text(max_size=3), st.lists(st.text(max_size=3), max_size=3), hostile),
        "stop_token_ids": st.one_of(st.lists(st.integers(-1, VOCAB + 1), max_size=3), hostile),
        "stop_regex": st.one_of(
            st.sampled_from(["[a-z]", "x+", "", "(", "a*"]),
            backtracking,
            st.lists(backtracking, min_size=1, max_size=40),
            hostile,
        ),
        "regex": nested_repeats,
        "ebnf": rule_chains,
        "logit_bias": st.one_of(
            st.dictionaries(
                st.sampled_from(["1", "7", "-3", " 5", str(VOCAB + 9), "x"]),
                st.one_of(st.floats(-150, 150), hostile),
                max_size=3,
            ),
            hostile,
        ),
        "seed": st.one_of(st.integers(-(2**70), 2**70), hostile),
        "ignore_eos": st.one_of(st.booleans(), hostile),
    },
)


@SETTINGS
@given(params=sampling)
def test_sampling_params_are_refused_by_name_or_honoured(engine, params):
    try:
        first = engine.generate("ab", params)
    except ValueError as e:
        assert any(name in str(e) for name in params), (params, str(e))
        return
    outs = first if isinstance(first, list) else [first]
    assert len(outs) == params.get("n", 1)
    for out in outs:
        assert out["meta_info"]["completion_tokens"] <= params["max_new_tokens"]
        assert all(0 <= t < VOCAB for t in out["output_ids"])
    if params.get("seed") is not None and params.get("n", 1) == 1:
        assert engine.generate("ab", params)["output_ids"] == first["output_ids"]  # seeded: reproducible


# ---- grammars ----------------------------------------------------------------------------------
# A language as (Python regex, GBNF): literals, classes, sequences, alternatives, optional parts.
literal = st.text(alphabet="abxyz019-", min_size=1, max_size=3).map(lambda s: (re.escape(s), json.dumps(s)))
char_class = st.sampled_from([("[a-c]", "[a-c]"), ("[0-9]", "[0-9]"), ("[xyz]", "[xyz]")])


def _seq(parts: list[tuple[str, str]]) -> tuple[str, str]:
    return "".join(r for r, _ in parts), " ".join(g for _, g in parts)


def _alt(parts: list[tuple[str, str]]) -> tuple[str, str]:
    return "(" + "|".join(r for r, _ in parts) + ")", "(" + " | ".join(g for _, g in parts) + ")"


def _optional(part: tuple[str, str]) -> tuple[str, str]:
    # NOTE: llguidance 1.9's GBNF reader turns ((x)?)? into x?? and refuses it: x? is the same language
    if part[0].endswith(")?"):
        return part
    return f"({part[0]})?", f"({part[1]})?"


languages = st.recursive(
    st.one_of(literal, char_class),
    lambda inner: st.one_of(
        st.lists(inner, min_size=2, max_size=3).map(_seq),
        st.lists(inner, min_size=2, max_size=3).map(_alt),
        inner.map(_optional),
    ),
    max_leaves=6,
)
sampled = st.fixed_dictionaries(
    {"temperature": st.sampled_from([0, 0.7, 1.5]), "seed": st.integers(0, 99)},
    optional={
        "top_k": st.integers(1, 5),
        "top_p": st.floats(0.05, 1),
        "min_p": st.floats(0, 1),
        "repetition_penalty": st.floats(0.5, 2),
        "frequency_penalty": st.floats(-2, 2),
        "logit_bias": st.dictionaries(st.integers(0, VOCAB - 1).map(str), st.floats(-100, 100), max_size=4),
    },
)


@SETTINGS
@given(language=languages, kind=st.sampled_from(["regex", "ebnf"]), params=sampled)
def test_output_matches_the_regex_or_ebnf(engine, language, kind, params):
    regex, gbnf = language
    grammar = regex if kind == "regex" else f"root ::= {gbnf}"
    out = engine.generate("ab", {**params, kind: grammar, "max_new_tokens": GRAMMAR_TOKENS})
    assert out["meta_info"]["finish_reason"]["type"] == "stop", (grammar, out)
    assert re.fullmatch(regex, out["text"]), (grammar, out["text"])


@SETTINGS
@given(
    choices=st.lists(
        st.text(alphabet="abc xy1", min_size=1, max_size=6), min_size=1, max_size=4, unique=True
    ),
    params=sampled,
)
def test_output_is_one_of_the_choices(engine, choices, params):
    out = engine.generate("pick:", {**params, "choices": choices, "max_new_tokens": GRAMMAR_TOKENS})
    assert out["text"] in choices, (choices, out)


scalar_schemas = st.one_of(
    st.just({"type": "boolean"}),
    st.just({"type": "null"}),
    st.integers(-50, 50).map(lambda low: {"type": "integer", "minimum": low, "maximum": low + 20}),
    st.integers(0, 4).map(lambda n: {"type": "string", "maxLength": n, "pattern": "^[a-z]*$"}),
    st.lists(st.text(alphabet="abc", min_size=1, max_size=3), min_size=1, max_size=3, unique=True).map(
        lambda values: {"enum": values}
    ),
)
schemas = st.recursive(
    scalar_schemas,
    lambda inner: st.one_of(
        st.dictionaries(st.text(alphabet="kqw", min_size=1, max_size=3), inner, min_size=1, max_size=3).map(
            lambda props: {
                "type": "object",
                "properties": props,
                "required": sorted(props),
                "additionalProperties": False,
            }
        ),
        inner.map(lambda item: {"type": "array", "items": item, "maxItems": 2}),
    ),
    max_leaves=5,
)


@SETTINGS
@given(schema=schemas, params=sampled)
def test_finished_json_validates_against_its_schema(engine, schema, params):
    out = engine.generate("json:", {**params, "json_schema": json.dumps(schema), "max_new_tokens": 96})
    if out["meta_info"]["finish_reason"]["type"] == "length":
        return  # whitespace between JSON tokens is free: a random model may not finish in time
    jsonschema.validate(json.loads(out["text"]), schema)


@SETTINGS
@given(
    kind=st.sampled_from(["regex", "ebnf", "json_schema", "choices"]),
    text=st.one_of(
        st.text(max_size=30),
        st.sampled_from(
            [
                "(",
                "a{5000}",
                "root ::= root",
                "root ::= x",
                '{"type": "object", "minimum": 1e999}',
                "[]",
                '{"$ref": "#/x"}',
                "root ::= [",
                '{"type": "string", "pattern": "("}',
                "\ud800",
            ]
        ),
    ),
)
def test_arbitrary_grammar_text_is_refused_or_served(engine, kind, text):
    value: Any = [text] if kind == "choices" else text
    try:
        out = engine.generate("ab", {kind: value, "max_new_tokens": 8})
        assert out["meta_info"]["completion_tokens"] <= 8
    except ValueError:
        pass
    alive(engine)


@settings(SETTINGS, max_examples=15)
@given(
    grammar=st.one_of(
        hs.deep_ebnf.map(lambda g: {"ebnf": g}),
        hs.nested_repeats.map(lambda r: {"regex": r}),
        hs.repeat_schemas.map(lambda j: {"json_schema": j}),
        st.lists(hs.backtracking, min_size=1, max_size=40).map(lambda p: {"stop_regex": p}),
    ),
    min_new=st.sampled_from([0, 6, 40]),
)
def test_hostile_grammars_are_refused_or_served(engine, grammar, min_new):
    params = {**grammar, "max_new_tokens": 40, "min_new_tokens": min_new}
    try:
        out = engine.generate("x" * 60, params)
        assert out["meta_info"]["completion_tokens"] <= 40
    except ValueError:
        pass
    alive(engine)


@pytest.mark.parametrize("grammar", ["root ::= root", "root ::= a\na ::= a"])
def test_a_grammar_no_output_satisfies_is_refused(engine, grammar):
    """Found by the fuzzing: it compiled, then failed its first token as an internal error (a 500)."""
    with pytest.raises(ValueError, match="no output can satisfy"):
        engine.generate("ab", {"ebnf": grammar, "max_new_tokens": 4})
    alive(engine)


@SETTINGS
@given(top=st.integers(0, VOCAB), start=st.integers(-1, 3), max_new=st.sampled_from([1, 4, 20_000, 1 << 20]))
def test_large_top_logprobs_are_refused_by_name_or_returned(engine, top, start, max_new):
    params = {"max_new_tokens": max_new, "temperature": 0}
    try:
        out = engine.generate(
            "abcd", params, return_logprob=True, logprob_start_len=start, top_logprobs_num=top
        )
    except ValueError as e:
        assert "top_logprobs_num" in str(e) or "max_new_tokens" in str(e), str(e)
        return
    assert top <= 20
    assert all(len(alts) == top for alts in out["meta_info"]["output_top_logprobs"])
