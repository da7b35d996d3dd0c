"""The ``priority`` field on every generate API's request body (SGLang's field; a 400 names a bad one)."""

from __future__ import annotations

import pytest

from radixlm.runtime.server.anthropic_protocol import MessagesRequest
from radixlm.runtime.server.errors import ApiError
from radixlm.runtime.server.native_protocol import parse_generate
from radixlm.runtime.server.openai_protocol import ChatCompletionRequest, CompletionRequest, parse_body
from radixlm.runtime.server.responses_protocol import ResponsesRequest


def test_native_generate_takes_a_top_level_priority_for_every_prompt():
    parsed = parse_generate({"text": ["a", "b"], "priority": -3})
    assert [item.priority for item in parsed.items] == [-3, -3]
    assert parse_generate({"text": "a"}).items[0].priority is None
    for bad in ("high", 1.5, True):
        with pytest.raises(ApiError, match="priority must be an integer"):
            parse_generate({"text": "a", "priority": bad})


@pytest.mark.parametrize(
    ("model", "body"),
    [
        (CompletionRequest, {"prompt": "a"}),
        (ChatCompletionRequest, {"messages": [{"role": "user", "content": "a"}]}),
        (ResponsesRequest, {"input": "a"}),
        (MessagesRequest, {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "a"}]}),
    ],
)
def test_openai_and_anthropic_bodies_take_priority(model, body):
    assert parse_body(model, {**body, "priority": 7}).priority == 7
    assert parse_body(model, body).priority is None
    with pytest.raises(ApiError):
        parse_body(model, {**body, "priority": "urgent"})
