"""``sgl.separate_reasoning`` in the language: a gen's thinking split from its answer, as in SGLang."""

from __future__ import annotations

import pytest

import radixlm as sgl
from tests.frontend.fake_backend import FakeBackend


def test_variable_holds_the_answer_and_the_thinking_its_own_variable():
    fake = FakeBackend(canned={"Q: 2+2?\nA:": "<think>\nadd them</think>\n\nIt is 4."})

    @sgl.function
    def qa(s):
        s += "Q: 2+2?\nA:"
        s += sgl.separate_reasoning(sgl.gen("answer", max_tokens=30), model_type="qwen3")
        s += "\nThanks."

    state = qa.run(backend=fake, temperature=0)
    assert state["answer"] == "It is 4."
    assert state["answer_reasoning_content"] == "add them"
    assert state.text() == "Q: 2+2?\nA:<think>\nadd them</think>\n\nIt is 4.\nThanks."


def test_bad_uses_fail_in_the_users_code():
    with pytest.raises(ValueError, match="unknown reasoning parser"):
        sgl.separate_reasoning(sgl.gen("a"), model_type="nope")
    with pytest.raises(ValueError, match="needs a gen"):
        sgl.separate_reasoning(sgl.gen(), model_type="qwen3")
