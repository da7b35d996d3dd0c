"""Limits at the door against hostile grammars and logprob requests (issue 27, classes 1, 4 and 6):
each is refused with a 400 naming the limit before any native library or the scheduler sees it."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from radixlm.runtime.messages import TokenizedGenerateReq
from radixlm.runtime.requests.ebnf_structure import grammar_shape
from radixlm.runtime.requests.regex_repeats import repeat_cost
from radixlm.runtime.requests.request_limits import MAX_GRAMMAR_RULE_DEPTH, RequestLimits
from radixlm.runtime.requests.request_validation import InvalidRequest, ModelLimits, validate_request
from radixlm.runtime.sampling.sampling_params import SamplingParams

LIMITS = ModelLimits(vocab_size=1000, context_length=100_000)


def _check(prompt_len: int = 3, **fields) -> None:
    params = SamplingParams.from_dict(fields.pop("sampling", {}))
    limits = fields.pop("limits", LIMITS)
    req = TokenizedGenerateReq("r", np.ones(prompt_len, dtype=np.int32), params, **fields)
    validate_request(req, limits)


def _refused(fragment: str, param: str, **fields) -> None:
    with pytest.raises(InvalidRequest, match=fragment) as e:
        _check(**fields)
    assert e.value.param == param


def _chain(n: int, lark: bool = False) -> str:
    if lark:
        return "start: r0\n" + "".join(f'r{i}: r{i + 1} "x"\n' for i in range(n)) + f'r{n}: "y"\n'
    return "root ::= r0\n" + "".join(f'r{i} ::= r{i + 1} "x"\n' for i in range(n)) + f'r{n} ::= "y"\n'


# ---- class 1: grammar structure --------------------------------------------------------------
@pytest.mark.parametrize(
    "grammar, fragment",
    [
        (_chain(600), "chain of rule references"),
        (_chain(400, lark=True), "chain of rule references"),
        (
            "root ::= "
            + " ".join(f"a{i}" for i in range(1100))
            + "".join(f'\na{i} ::= "x"' for i in range(1100)),
            "rules",
        ),
        ("root ::= " + "(" * 100 + '"a"' + ")" * 100, "nested groups"),
        ("start: " + "[" * 70 + '"a"' + "]" * 70, "nested groups"),
    ],
    ids=["gbnf-chain", "lark-chain", "many-rules", "nested-parens", "nested-brackets"],
)
def test_ebnf_over_the_structure_limits_is_refused(grammar, fragment):
    limits = ModelLimits(1000, 100_000, RequestLimits(max_grammar_bytes=1 << 20))
    _refused(fragment, "ebnf", sampling={"ebnf": grammar}, limits=limits)


def test_a_chain_this_long_crashes_llguidance_in_its_own_process():
    """Why the structure limits exist: the same chain kills the process that compiles it."""
    code = (
        "import llguidance, sys; g = llguidance.grammar_from('lark', sys.stdin.read());"
        "llguidance.LLMatcher.validate_grammar(g)"
    )
    chain = _chain(4000, lark=True)
    proc = subprocess.run([sys.executable, "-c", code], input=chain, text=True, capture_output=True)
    assert proc.returncode < 0  # killed by a signal (SIGSEGV), not a Python error


def test_ordinary_grammars_pass():
    _check(sampling={"ebnf": _chain(100)})
    _check(sampling={"ebnf": 'root ::= item+\nitem ::= "[" (item | "x")* "]"'})
    assert grammar_shape(_chain(MAX_GRAMMAR_RULE_DEPTH - 2)).depth == MAX_GRAMMAR_RULE_DEPTH


@pytest.mark.parametrize("field", ["ebnf", "structural_tag"])
def test_ebnf_and_structural_tag_count_in_max_grammar_bytes(field):
    small = ModelLimits(1000, 100_000, RequestLimits(max_grammar_bytes=200))
    text = (
        'root ::= "' + "x" * 300 + '"'
        if field == "ebnf"
        else json.dumps(
            {
                "structures": [{"begin": "<f>", "schema": {"description": "x" * 300}, "end": "</f>"}],
                "triggers": ["<f>"],
            }
        )
    )
    _refused("above this server's limit of 200", field, sampling={field: text}, limits=small)


def test_structural_tag_schemas_are_checked_like_json_schema():
    tag = {
        "structures": [
            {"begin": "<f>", "schema": {"type": "string", "pattern": "(a{99}){99}"}, "end": "</f>"}
        ],
        "triggers": ["<f>"],
    }
    _refused("product of nested", "structural_tag", sampling={"structural_tag": json.dumps(tag)})


@settings(max_examples=40, deadline=None, derandomize=True)
@given(depth=st.integers(MAX_GRAMMAR_RULE_DEPTH + 1, 4000), lark=st.booleans())
def test_deep_rule_chains_are_always_refused(depth, lark):
    limits = ModelLimits(1000, 100_000, RequestLimits(max_grammar_bytes=1 << 20))
    with pytest.raises(InvalidRequest, match="ebnf grammar has"):
        _check(sampling={"ebnf": _chain(depth, lark)}, limits=limits)


# ---- class 4: nested counted repeats ---------------------------------------------------------
@pytest.mark.parametrize(
    "regex", ["(a{99}){99}", "((a{16}){16}){17}", "(?:[a-z]{70}){70}", "((ab){100}|c){50}", "(x{4097})"]
)
def test_nested_repeats_multiplying_past_the_limit_are_refused(regex):
    _refused("product of nested counted repeats", "regex", sampling={"regex": regex})


def test_many_large_repeats_in_a_row_are_refused_by_their_unrolled_size():
    _refused("unrolled", "regex", sampling={"regex": "a{4000}" * 40})


@pytest.mark.parametrize("where", ["pattern", "patternProperties", "nested"])
def test_a_json_schema_pattern_is_checked_like_regex(where):
    bad = "(a{99}){99}"
    schema = {
        "pattern": {"type": "string", "pattern": bad},
        "patternProperties": {"type": "object", "patternProperties": {bad: {"type": "string"}}},
        "nested": {
            "type": "object",
            "properties": {"a": {"type": "array", "items": {"type": "string", "pattern": bad}}},
        },
    }[where]
    _refused("product of nested", "json_schema", sampling={"json_schema": json.dumps(schema)})


def test_ordinary_repeats_pass():
    for regex in [r"\d{3}-\d{4}", "(ab){2,5}", "[a-z]{1,4096}", "((a{8}){8}){8}"]:
        _check(sampling={"regex": regex})
    _check(sampling={"json_schema": json.dumps({"type": "string", "pattern": "[A-Z]{2}[0-9]{6}"})})


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(st.integers(2, 400), min_size=1, max_size=4))
def test_repeat_cost_is_the_product_of_nested_counts(counts):
    regex = "a"
    for c in counts:
        regex = f"(?:{regex}){{{c}}}"
    product = int(np.prod(counts))
    assert repeat_cost(regex)[0] == product
    if product > 4096:
        with pytest.raises(InvalidRequest, match="product of nested"):
            _check(sampling={"regex": regex})


# ---- class 6: top logprobs --------------------------------------------------------------------
def test_top_logprobs_per_position_is_capped():
    _refused("above this server's limit of 20", "top_logprobs_num", return_logprob=True, top_logprobs_num=21)
    _check(return_logprob=True, top_logprobs_num=20)


@pytest.mark.parametrize(
    "prompt_len, start, top, max_new",
    [(60, 0, 50_000, 1), (1000, 0, 20, 60_000), (60, -1, 20, 1 << 20), (30_000, 5, 40, 1)],
)
def test_top_logprobs_times_positions_is_capped(prompt_len, start, top, max_new):
    wide = ModelLimits(100_000, 100_000, RequestLimits(max_top_logprobs=100_000))
    _refused(
        "max_logprob_entries",
        "top_logprobs_num",
        prompt_len=prompt_len,
        return_logprob=True,
        logprob_start_len=start,
        top_logprobs_num=top,
        sampling={"max_new_tokens": max_new},
        limits=wide,
    )


def test_new_tokens_count_only_as_far_as_the_context_reaches():
    short = ModelLimits(1000, 4096, RequestLimits())
    _check(
        prompt_len=96,
        return_logprob=True,
        top_logprobs_num=20,
        sampling={"max_new_tokens": 1 << 20},
        limits=short,
    )


def test_top_logprobs_limits_follow_the_server_flags():
    limits = ModelLimits(1000, 100_000, RequestLimits(max_top_logprobs=1000, max_logprob_entries=10**9))
    _check(prompt_len=8000, return_logprob=True, logprob_start_len=0, top_logprobs_num=1000, limits=limits)
