"""``stop_regex`` in the scheduler: RE2 (no backtracking), compiled once per request, and each step
searching only the text that can hold a new match, with the same stops as a search of the whole output.

The reference is Python's ``re`` (ASCII classes, as RE2's) over the whole decoded output at every
step (what the checker did before), on the tiny byte-level tokenizer (multi-byte characters arrive in pieces).
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

from radixlm.runtime.sampling.sampling_params import SamplingParams
from radixlm.runtime.sampling.stop_regex import MAX_STOP_REGEX_CHARS, MAX_STOP_REGEXES, StopRegexes
from radixlm.runtime.scheduler.req import Req
from radixlm.runtime.scheduler.stop_checker import StopChecker
from tests.helpers.model_helpers import save_tiny_tokenizer


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    path = tmp_path_factory.mktemp("tok")
    save_tiny_tokenizer(path)
    return AutoTokenizer.from_pretrained(str(path))


class _CountingTokenizer:
    """The real tokenizer, counting the characters it decodes (the work a step does)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.decoded = 0

    def decode(self, ids, skip_special_tokens=True):
        text = self.inner.decode(ids, skip_special_tokens=skip_special_tokens)
        self.decoded += len(text)
        return text


def _run(tokenizer, text: str, patterns: list[str], min_new_tokens: int = 0) -> tuple:
    """Feed ``text`` token by token; (tokens generated when a stop regex fired, what it matched)."""
    checker = StopChecker(tokenizer, eos_token_ids=[], context_length=1 << 30)
    params = SamplingParams.from_dict(
        {"stop_regex": patterns, "max_new_tokens": 1 << 20, "min_new_tokens": min_new_tokens}
    )
    req = Req("r", [1], params)
    ids = getattr(tokenizer, "inner", tokenizer).encode(text)
    for token in ids:
        req.output_ids.append(token)
        reason = checker.check(req)
        if reason is not None:
            return len(req.output_ids), reason.matched
    return None, None


def _reference(tokenizer, text: str, patterns: list[str], min_new_tokens: int = 0) -> tuple:
    ids = tokenizer.encode(text)
    for n in range(max(1, min_new_tokens), len(ids) + 1):
        out = tokenizer.decode(ids[:n], skip_special_tokens=True)
        for p in patterns:
            m = re.search(p, out, re.ASCII)  # RE2's \w, \d and \b are ASCII
            if m is not None and m.group(0):
                return n, m.group(0)
    return None, None


CASES = [
    ("the end is near. THE END", [r"END"]),
    ("call 555-1234 now", [r"\d{3}-\d{4}"]),
    ("abc def ghi", [r"\bdef\b"]),
    ("xx ab ab", [r"^ab"]),  # anchored: only at the start of the output, never at a window's start
    ("ab ab", [r"^ab"]),
    ("naïve café über", [r"é\s"]),  # multi-byte characters split over tokens
    ("aaaa<tag>body</tag> more", [r"<tag>.*?</tag>"]),  # unbounded: whole-output search
    ("one two three", [r"four", r"t[a-z]{3}e"]),
    ("1 22 333 4444", [r"(\d)(\d)(\d)(\d)"]),
]


@pytest.mark.parametrize("text, patterns", CASES)
def test_incremental_search_stops_where_a_whole_output_search_does(tokenizer, text, patterns):
    assert _run(tokenizer, text, patterns) == _reference(tokenizer, text, patterns)


def test_min_new_tokens_counts_matches_made_before_it(tokenizer):
    text = "stop here and then much more text"
    assert _run(tokenizer, text, ["stop"], min_new_tokens=20) == _reference(tokenizer, text, ["stop"], 20)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    text=st.text(alphabet="ab01 é", max_size=40),  # no newline: RE2's $ ignores a final one
    patterns=st.lists(
        st.sampled_from(["ab", "b0", r"a{2,3}", r"[01]+\s", r"é.", r"\ba", r"1$", r"0.*1", "^b", "(a|b)1"]),
        min_size=1,
        max_size=3,
    ),
    min_new=st.integers(0, 6),
)
def test_incremental_search_matches_the_reference_on_random_outputs(tokenizer, text, patterns, min_new):
    assert _run(tokenizer, text, patterns, min_new) == _reference(tokenizer, text, patterns, min_new)


BACKTRACKING = [r"(x+x+)+y", r"(a|aa)+b", r"(x*)*z", r"((ab)*|a)*c", r"(\w+\s?)*!"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("pattern", BACKTRACKING)
def test_backtracking_patterns_run_in_linear_time(tokenizer, pattern):
    """Each of these takes Python's ``re`` exponential time on the output below (the old checker
    froze the scheduler); RE2 answers in one pass."""
    text = ("x" if "x" in pattern else "a" if "a" in pattern else "w") * 3000
    counting = _CountingTokenizer(tokenizer)
    assert _run(counting, text, [pattern]) == (None, None)


def test_each_step_decodes_only_a_window_for_bounded_patterns(tokenizer):
    counting = _CountingTokenizer(tokenizer)
    text = "z" * 2000
    _run(counting, text, [r"\d{3}-\d{4}", "needle"])
    # 2000 steps, each decoding about two windows of (8 + 4) tokens, not the whole output
    assert counting.decoded < 2000 * 2 * 16


@pytest.mark.parametrize(
    "bad, why",
    [
        (r"(a)\1", "backreferences"),
        (r"(?P<w>a)(?P=w)", "named backreferences"),
        (r"x(?=y)", "look-around"),
        (r"(?<!x)y", "look-around"),
        (r"(?>ab)", "atomic groups"),
        (r"a++", "possessive"),
        ("a" * (MAX_STOP_REGEX_CHARS + 1), f"at most {MAX_STOP_REGEX_CHARS}"),
        ([f"p{i}" for i in range(MAX_STOP_REGEXES + 1)], f"at most {MAX_STOP_REGEXES}"),
        (r"a{1001}", "repetition"),
        (r"((((a{100}){100}){100}){100})", "repetition|pattern too large"),
    ],
)
def test_patterns_re2_cannot_run_are_refused_by_name(bad, why):
    with pytest.raises(ValueError, match=why):
        SamplingParams.from_dict({"stop_regex": bad})


def test_patterns_are_compiled_once_per_request():
    state = StopRegexes(["a.c", r"\d+"])
    programs = list(state.programs)
    assert state.search("xxabc", 1) == "abc"
    assert state.programs == programs and state.width is None
    assert StopRegexes(["a.c"]).width == 3
