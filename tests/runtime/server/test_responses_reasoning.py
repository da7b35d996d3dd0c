"""``/v1/responses`` with ``--reasoning-parser``: the thinking comes back as a ``reasoning`` item before
the answer's ``message``, streamed as ``response.reasoning_text.delta`` events that add up to it."""

from __future__ import annotations

import openai
import pytest
from openai.types.responses import ResponseOutputMessage, ResponseReasoningItem

from tests.runtime.server.test_reasoning_server import SHAPE, launch_thinking_server


@pytest.fixture(scope="module")
def client(tiny_llama_dir):
    with launch_thinking_server(tiny_llama_dir) as handle:
        yield openai.OpenAI(base_url=handle.url + "/v1", api_key="unused", max_retries=0)


def _create(client, **kw):
    return client.responses.create(
        model="tiny",
        input="Think, then answer.",
        temperature=0,
        max_output_tokens=40,
        extra_body={"regex": SHAPE},
        **kw,
    )


def test_thinking_is_a_reasoning_item_and_streams_as_its_own_events(client):
    whole = _create(client)
    reasoning, message = whole.output
    assert isinstance(reasoning, ResponseReasoningItem) and isinstance(message, ResponseOutputMessage)
    [thinking] = reasoning.content
    assert thinking.type == "reasoning_text" and " " in thinking.text and "</think>" not in thinking.text
    assert whole.output_text.endswith("!") and "\n" not in whole.output_text
    assert whole.usage.output_tokens_details.reasoning_tokens > 0
    events = list(_create(client, stream=True))
    kinds = [e.type for e in events]
    deltas = [e.delta for e in events if e.type == "response.reasoning_text.delta"]
    assert len(deltas) > 1 and "".join(deltas) == thinking.text
    assert kinds.index("response.reasoning_text.done") < kinds.index("response.output_text.delta")
    assert [e.output_index for e in events if e.type == "response.output_item.added"] == [0, 1]
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == whole.output_text and kinds[-1] == "response.completed"
