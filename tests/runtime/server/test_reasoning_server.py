"""``--reasoning-parser`` on a server with a tiny random model and a chat template that thinks: the
thinking lands in ``reasoning_content`` (streamed as its own deltas) and the answer in ``content``."""

from __future__ import annotations

import openai
import pytest

from radixlm.runtime.server.launch import launch_server

THINKING_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] "
    "+ '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% if enable_thinking is not defined or enable_thinking %}{{ '<think>\n' }}{% endif %}{% endif %}"
)
# The random model's output is forced into a thinking-then-answer shape by a regex.
SHAPE = r"[a-z]{3,8} [a-z]{3,8}\n</think>\n\n[a-z]{3,8}!"
MESSAGES = [{"role": "user", "content": "Think, then answer."}]


def launch_thinking_server(model_dir: str):
    """A tiny-model server whose chat template thinks and whose reasoning parser splits it off."""
    return launch_server(
        model=model_dir,
        device="cpu",
        num_threads=1,
        kv_cache_gb=0.02,
        context_length=512,
        chat_template=THINKING_TEMPLATE,
        reasoning_parser="deepseek-r1",
    )


@pytest.fixture(scope="module")
def client(tiny_llama_dir):
    with launch_thinking_server(tiny_llama_dir) as handle:
        yield openai.OpenAI(base_url=handle.url + "/v1", api_key="unused", max_retries=0)


def _create(client, **kw):
    kw.setdefault("max_tokens", 40)
    return client.chat.completions.create(
        model="tiny",
        messages=MESSAGES,
        temperature=0,
        extra_body={"regex": SHAPE, **kw.pop("extra_body", {})},
        **kw,
    )


def test_reasoning_and_answer_split_and_stream_alike(client):
    whole = _create(client).choices[0].message
    thinking, answer = whole.model_extra["reasoning_content"], whole.content
    assert thinking and " " in thinking and "</think>" not in thinking
    assert answer.endswith("!") and "\n" not in answer
    reasoning_deltas, content_deltas = [], []
    for chunk in _create(client, stream=True):
        if chunk.choices:
            delta = chunk.choices[0].delta
            reasoning_deltas.append((delta.model_extra or {}).get("reasoning_content") or "")
            content_deltas.append(delta.content or "")
    assert "".join(reasoning_deltas) == thinking and "".join(content_deltas) == answer
    assert sum(1 for d in reasoning_deltas if d) > 1  # streamed as it was generated


def test_separate_reasoning_false_keeps_the_raw_text(client):
    raw = _create(client, extra_body={"separate_reasoning": False}).choices[0].message
    assert "</think>" in raw.content and not (raw.model_extra or {}).get("reasoning_content")


def test_chat_template_kwargs_reach_the_template(client):
    thinking = _create(client, max_tokens=1).usage.prompt_tokens
    plain = _create(
        client, max_tokens=1, extra_body={"chat_template_kwargs": {"enable_thinking": False}}
    ).usage.prompt_tokens
    assert thinking - plain == len("<think>\n")  # the tiny tokenizer is byte-level
