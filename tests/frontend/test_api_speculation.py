"""The matching rules of API speculative execution (``radixlm.frontend.api_speculation``), on given
outputs; the live path against our own server is ``tests/frontend/backends/test_openai_speculation.py``."""

from __future__ import annotations

import pytest

from radixlm.frontend.api_speculation import ChatTurn, CompletionSpeculation, Piece, match_turn


def _turn(*parts: str | tuple[str, tuple[str, ...]]) -> list[Piece]:
    """Fixed text as strings, gens as ``(name, stops)``."""
    return [Piece(p) if isinstance(p, str) else Piece("", True, p[0], p[1]) for p in parts]


def test_gens_end_at_their_stop_and_the_last_takes_the_rest():
    pieces = _turn(("name", ("\n",)), "\nAge:", ("age", ()))
    assert match_turn(pieces, "Ada\nAge: 36 years")
    assert [p.text for p in pieces] == ["Ada", "\nAge:", " 36 years"]


def test_a_gen_without_stop_ends_where_the_next_fixed_text_starts():
    pieces = _turn(("a", ()), ", then ", ("b", (".", "!")), "!")
    assert match_turn(pieces, "red, then blue! more")
    assert [p.text for p in pieces] == ["red", ", then ", "blue", "!"]


def test_a_mismatch_keeps_what_matched_before_it():
    pieces = _turn(("a", (";",)), "; b=", ("b", ()))
    assert not match_turn(pieces, "x; c=y")
    assert (pieces[0].text, pieces[2].text) == ("x", "")
    assert not match_turn(_turn(("a", (";",)), "; b=", ("b", ())), "no stop at all")


def test_chat_turn_retries_then_keeps_the_partial_match():
    outputs = iter(["1 nope", "2 nope", "3;b"])
    turn = ChatTurn(16)
    turn.add_gen("a", {"max_new_tokens": 4, "stop": ";", "temperature": 0})
    turn.fill(";")
    turn.add_gen("b", {"max_new_tokens": 4, "temperature": 0})
    pieces, meta = turn.resolve(lambda options: (next(outputs), {"sent": options}))
    assert [p.text for p in pieces] == ["3", ";", "b"] and meta["api_spec_requests"] == 3
    assert meta["sent"] == {"max_new_tokens": 16, "temperature": 0}  # no stop; N tokens
    with pytest.raises(ValueError, match="share their sampling options"):
        turn.add_gen("c", {"temperature": 1})


def test_completion_speculation_serves_later_gens_from_one_output():
    sent: list[dict] = []

    def generate(options):
        sent.append(options)
        return "Ada\nAge: 36\nCity: Rome", {}

    spec = CompletionSpeculation(32)
    assert spec.gen({"max_new_tokens": 8, "stop": "\n"}, generate)[0] == "Ada"
    spec.fill("\nAge:")
    assert spec.gen({"max_new_tokens": 8, "stop": ["\n"]}, generate)[0] == " 36"
    spec.fill("\nCity:")
    assert spec.gen({"max_new_tokens": 3}, generate)[0] == " Ro"  # characters, as in SGLang
    assert sent == [{"max_new_tokens": 32, "stop": None}]
    spec.fill("X")  # the program went elsewhere: the rest is dropped and the next gen asks again
    assert spec.text == ""
    spec.gen({"max_new_tokens": 8, "stop": "\n"}, generate)
    assert len(sent) == 2
