"""StopChecker: stop tokens and strings from min_new_tokens on, grammar ends, length limits, aborts."""

from __future__ import annotations

from radixlm.runtime.scheduler.finish_reason import FinishAbort, FinishLength, FinishStop
from radixlm.runtime.scheduler.stop_checker import StopChecker
from tests.runtime.scheduler.scheduler_fakes import make_req

EOS = 0
PIECES = {EOS: "</s>", 1: "He", 2: "llo", 3: " wo", 4: "rld", 5: "!", 6: "x", 7: "\n"}


class PieceTokenizer:
    """Decodes by concatenating fixed pieces; special tokens are dropped on request."""

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return "".join(PIECES[i] for i in ids if not (skip_special_tokens and i == EOS))


class FakeGrammar:
    def __init__(self, terminated: bool) -> None:
        self.terminated = terminated

    def is_terminated(self) -> bool:
        return self.terminated


def _checker(context_length: int = 100) -> StopChecker:
    return StopChecker(PieceTokenizer(), [EOS], context_length)


def _after(tokens: list[int], prompt_len: int = 3, **params):
    """The checker's verdict after each token is appended in turn."""
    checker = _checker(params.pop("context_length", 100))
    params.setdefault("max_new_tokens", 50)
    req = make_req("r", range(10, 10 + prompt_len), **params)
    verdicts = []
    for token in tokens:
        req.output_ids.append(token)
        verdicts.append(checker.check(req))
    return verdicts


def test_eos_stops_unless_ignored():
    assert _after([1, 2, EOS]) == [None, None, FinishStop(EOS)]
    assert _after([1, EOS], ignore_eos=True) == [None, None]


def test_stop_token_ids_stop_even_with_ignore_eos():
    assert _after([1, 5], stop_token_ids=[5], ignore_eos=True) == [None, FinishStop(5)]


def test_a_stop_string_is_matched_across_token_boundaries():
    # "lo wo" only exists once " wo" follows "llo"
    assert _after([1, 2, 3, 4], stop=["lo wo"]) == [None, None, FinishStop("lo wo"), FinishStop("lo wo")]
    assert _after([1, 2, 4], stop=["lo wo"]) == [None, None, None]


def test_the_first_listed_stop_string_that_matches_is_reported():
    assert _after([1, 2], stop=["zzz", "llo", "Hell"]) == [None, FinishStop("llo")]


def test_min_new_tokens_defers_every_stop_but_not_the_length_limit():
    verdicts = _after([EOS, 5, 1, 2, EOS], min_new_tokens=3, stop_token_ids=[5], stop=["Hello"])
    assert verdicts == [None, None, None, FinishStop("Hello"), FinishStop(EOS)]
    assert _after([EOS, EOS], min_new_tokens=2, max_new_tokens=2) == [None, FinishStop(EOS)]
    assert _after([6, 6], min_new_tokens=2, max_new_tokens=2) == [None, FinishLength(2)]


def test_max_new_tokens_reports_the_limit():
    assert _after([6, 6, 6], max_new_tokens=3) == [None, None, FinishLength(3)]


def test_the_context_limit_reports_the_tokens_generated():
    # a 7-token prompt in a 10-token context: the third output token fills it
    assert _after([6, 6, 6], prompt_len=7, context_length=10) == [None, None, FinishLength(3)]


def test_a_terminated_grammar_stops_without_a_match():
    checker = _checker()
    req = make_req("r", [10, 11], max_new_tokens=50)
    req.output_ids.append(6)
    req.grammar = FakeGrammar(terminated=False)
    assert checker.check(req) is None
    req.grammar = FakeGrammar(terminated=True)
    assert checker.check(req) == FinishStop(None)


def test_a_grammar_end_stops_before_min_new_tokens():
    """Nothing can follow a terminated grammar: waiting for min_new_tokens would mask every token."""
    req = make_req("r", [10, 11], max_new_tokens=50, min_new_tokens=40)
    req.output_ids.append(EOS)
    req.grammar = FakeGrammar(terminated=True)
    assert _checker().check(req) == FinishStop(None)


def test_a_pending_abort_wins():
    checker = _checker()
    req = make_req("r", [10, 11], max_new_tokens=1)
    req.output_ids.append(EOS)
    req.to_abort = "aborted"
    reason = checker.check(req)
    assert isinstance(reason, FinishAbort) and reason.message == "aborted"


def test_finish_reasons_keep_their_wire_format():
    assert FinishStop(EOS).to_dict() == {"type": "stop", "matched": EOS}
    assert FinishStop("lo wo").to_dict() == {"type": "stop", "matched": "lo wo"}
    assert FinishLength(12).to_dict() == {"type": "length", "length": 12}
    assert FinishAbort("bad", 400).to_dict() == {"type": "abort", "message": "bad", "status_code": 400}
    assert FinishAbort("aborted", 499).to_dict()["status_code"] == 499
