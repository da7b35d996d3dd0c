"""``OpenAI`` against our own ``/v1``: ``token_usage`` and ``num_api_spec_tokens`` speculative execution.

Each program is built from the output the server gives for the same prompt (greedy, so repeatable):
the gens must then be filled by matching the program's fixed text in that output, from one request
where the program without speculation needs one per gen.
"""

from __future__ import annotations

import openai
import pytest

import radixlm as sgl
from radixlm.frontend.errors import ProgramError
from tests.frontend.backends.conftest import MODEL

SPEC = 40  # tokens generated ahead
LONG = {"temperature": 0, "ignore_eos": True}  # the random model's output runs to its length
QUESTION = "Make a character."


def _cut(text: str, start: int = 1) -> int:
    """A position from ``start`` on whose character does not occur before it (a stop string that
    first matches there)."""
    for k in range(start, len(text) - 4):
        if text[k] not in text[:k] and text[k] != "\ufffd":
            return k
    raise AssertionError(f"no usable stop character in {text!r}")


@pytest.fixture()
def backend(api_server):
    return sgl.OpenAI(MODEL, base_url=api_server.url + "/v1", api_key="none")


@pytest.fixture()
def client(api_server):
    return openai.OpenAI(base_url=api_server.url + "/v1", api_key="none", max_retries=0)


def _chat_program(stop: str, fixed: str, spec: int | None = SPEC):
    @sgl.function(num_api_spec_tokens=spec)
    def character(s):
        s += sgl.user(QUESTION)
        s += sgl.assistant(sgl.gen("a", stop=stop) + fixed + sgl.gen("b"))

    return character


def _extra() -> dict:
    return {"temperature": 0, "extra_body": {"ignore_eos": True}}


def _chat_raw(client) -> openai.types.chat.ChatCompletion:
    messages = [{"role": "user", "content": QUESTION}]
    return client.chat.completions.create(model=MODEL, messages=messages, max_tokens=SPEC, **_extra())


def test_chat_turn_filled_from_one_request(backend, client):
    raw = _chat_raw(client)
    text = raw.choices[0].message.content
    k = _cut(text)
    fixed = text[k : k + 3]  # starts with the stop string, which stays in the output
    state = _chat_program(text[k], fixed).run(backend=backend, **LONG)
    assert state["a"] == text[:k] and state["b"] == text[k + 3 :]
    assert state.messages()[-1] == {"role": "assistant", "content": text}
    assert state.get_meta_info("a")["api_spec_requests"] == 1
    assert (backend.token_usage.prompt_tokens, backend.token_usage.completion_tokens) == (
        raw.usage.prompt_tokens,
        raw.usage.completion_tokens,
    )


def test_chat_turns_speculate_per_state_in_run_batch(backend, client):
    text = _chat_raw(client).choices[0].message.content
    k = _cut(text)
    program = _chat_program(text[k], text[k : k + 3])
    states = program.run_batch([{}, {}, {}], backend=backend, num_threads=3, **LONG)
    assert [(s["a"], s["b"]) for s in states] == [(text[:k], text[k + 3 :])] * 3
    assert backend.token_usage.prompt_tokens == 3 * _chat_raw(client).usage.prompt_tokens


def test_chat_turn_without_speculation_is_refused(backend, client):
    text = _chat_raw(client).choices[0].message.content
    k = _cut(text)
    with pytest.raises(ProgramError, match="num_api_spec_tokens"):
        _chat_program(text[k], text[k : k + 3], spec=None).run(backend=backend, **LONG)


def test_chat_turn_that_does_not_match_keeps_what_matched(backend, client):
    raw = _chat_raw(client)
    text = raw.choices[0].message.content
    k = _cut(text)
    with pytest.warns(UserWarning, match="did not follow"):
        state = _chat_program(text[k], "\x00 not in the output").run(backend=backend, **LONG)
    assert state["a"] == text[:k] and state["b"] == ""  # as SGLang's pattern matching leaves them
    assert state.get_meta_info("a")["api_spec_requests"] == 3
    assert backend.token_usage.prompt_tokens == 3 * raw.usage.prompt_tokens


def test_chat_gens_must_share_sampling_options(backend):
    @sgl.function(num_api_spec_tokens=SPEC)
    def mixed(s):
        s += sgl.user(QUESTION)
        s += sgl.assistant(sgl.gen("a", stop="\n", temperature=0) + "\n" + sgl.gen("b", temperature=0.5))

    with pytest.raises(ProgramError, match="must share their sampling options"):
        mixed.run(backend=backend)


def test_completion_gens_share_one_request(api_server, client):
    backend = sgl.OpenAI(MODEL, base_url=api_server.url + "/v1", api_key="none", is_chat_model=False)
    raw = client.completions.create(model=MODEL, prompt="Name:", max_tokens=SPEC, **_extra())
    text = raw.choices[0].text
    k1 = _cut(text)
    k2 = _cut(text, k1 + 4)

    def program(spec):
        @sgl.function(num_api_spec_tokens=spec)
        def character(s):
            s += "Name:" + sgl.gen("name", max_tokens=16, stop=text[k1])
            s += text[k1 : k1 + 3] + sgl.gen("job", max_tokens=16, stop=text[k2])
            s += text[k2] + sgl.gen("rest", max_tokens=3)  # no stop: SGLang counts characters here

        return character

    state = program(SPEC).run(backend=backend, **LONG)
    assert (state["name"], state["job"], state["rest"]) == (
        text[:k1],
        text[k1 + 3 : k2],
        text[k2 + 1 : k2 + 4],
    )
    assert state.text() == "Name:" + text[: k2 + 4]
    assert backend.token_usage.prompt_tokens == raw.usage.prompt_tokens  # one request
    with_spec = backend.token_usage.prompt_tokens
    backend.token_usage.reset()
    program(None).run(backend=backend, **LONG)
    assert backend.token_usage.prompt_tokens > with_spec  # one request per gen


def test_streaming_counts_usage_and_refuses_speculation(backend, client):
    @sgl.function
    def chat(s):
        s += sgl.user(QUESTION)
        s += sgl.assistant(sgl.gen("answer", max_tokens=8))

    state = chat.run(backend=backend, temperature=0, stream=True)
    streamed = "".join(state.text_iter("answer"))
    raw = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": QUESTION}], max_tokens=8, temperature=0
    )
    assert streamed == raw.choices[0].message.content
    assert (backend.token_usage.prompt_tokens, backend.token_usage.completion_tokens) == (
        raw.usage.prompt_tokens,
        raw.usage.completion_tokens,
    )
    with pytest.raises(ValueError, match="stream=True"):
        sgl.function(num_api_spec_tokens=SPEC)(chat.func).run(backend=backend, stream=True)


def test_instruct_models_default_to_completions():
    assert not sgl.OpenAI("gpt-3.5-turbo-instruct", api_key="none").is_chat_model  # as SGLang infers
    assert sgl.OpenAI("gpt-4o-mini", api_key="none").chat_mode
