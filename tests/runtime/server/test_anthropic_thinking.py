"""``thinking`` on the Messages API with ``--reasoning-parser``: a tiny random model forced (by SGLang's
``regex`` extension) into thinking-then-answer gives a thinking block then a text block, streamed as
``thinking_delta``s then ``text_delta``s that add up to the non-streamed blocks."""

from __future__ import annotations

import anthropic
import pytest

from tests.runtime.server.test_reasoning_server import SHAPE, launch_thinking_server

MODEL = "tiny"
USER = [{"role": "user", "content": "Think, then answer."}]
THINKING = {"type": "enabled", "budget_tokens": 30}


@pytest.fixture(scope="module")
def client(tiny_llama_dir):
    with launch_thinking_server(tiny_llama_dir) as handle:
        yield anthropic.Anthropic(base_url=handle.url, api_key="unused", max_retries=0)


def _kw(**extra):
    body = {"temperature": 0, "regex": SHAPE, **extra.pop("extra_body", {})}
    kw = {"model": MODEL, "max_tokens": 40, "messages": USER, "thinking": THINKING, "extra_body": body}
    return {**kw, **extra}


def test_thinking_block_then_text_block_streamed_alike(client):
    whole = client.messages.create(**_kw())
    assert [b.type for b in whole.content] == ["thinking", "text"] and whole.stop_reason == "end_turn"
    thinking, answer = whole.content[0].thinking, whole.content[1].text
    assert " " in thinking and "</think>" not in thinking and answer.endswith("!")
    with client.messages.stream(**_kw()) as stream:
        deltas = [(e.delta.type, e.index) for e in stream if e.type == "content_block_delta"]
        final = stream.get_final_message()
    assert [b.model_dump() for b in final.content] == [b.model_dump() for b in whole.content]
    kinds = [kind for kind, _ in deltas]
    assert kinds.count("thinking_delta") > 1 and kinds.count("text_delta") >= 1  # streamed as generated
    assert kinds.index("text_delta") > max(i for i, k in enumerate(kinds) if k == "thinking_delta")
    assert {index for kind, index in deltas if kind == "text_delta"} == {1}


def test_disabled_thinking_reaches_the_template_and_omitted_hides_the_text(client):
    counted = client.messages.count_tokens(model=MODEL, messages=USER, thinking=THINKING).input_tokens
    plain = client.messages.count_tokens(model=MODEL, messages=USER, thinking={"type": "disabled"})
    assert counted - plain.input_tokens == len("<think>\n")  # the tiny tokenizer is byte-level
    hidden = client.messages.create(**_kw(thinking={**THINKING, "display": "omitted"}))
    assert [b.type for b in hidden.content] == ["thinking", "text"] and hidden.content[0].thinking == ""


def test_thinking_history_is_left_out_of_the_prompt(client):
    turn = [
        {"type": "thinking", "thinking": "long thoughts " * 20, "signature": ""},
        {"type": "text", "text": "ok"},
    ]
    history = [*USER, {"role": "assistant", "content": turn}, {"role": "user", "content": "Again."}]
    without = [*USER, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "Again."}]
    count = client.messages.count_tokens
    assert (
        count(model=MODEL, messages=history).input_tokens == count(model=MODEL, messages=without).input_tokens
    )
