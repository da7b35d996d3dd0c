"""``radixlm.Anthropic`` through the ``anthropic`` SDK against our own ``/v1/messages``: each gen equals
what the SDK answers for the same conversation (greedy), with system, multiple turns, stop sequences,
assistant prefill, streaming and token usage; what the API cannot serve raises naming it."""

from __future__ import annotations

import anthropic
import pytest

import radixlm as sgl
from radixlm.frontend.errors import ProgramError, UnsupportedFeatureError
from tests.frontend.backends.conftest import MODEL

SYSTEM = "You are terse."
GREEDY = {"temperature": 0}


@pytest.fixture()
def backend(api_server):
    return sgl.Anthropic(MODEL, base_url=api_server.url, api_key="none", max_retries=0)


@pytest.fixture()
def client(api_server):
    return anthropic.Anthropic(base_url=api_server.url, api_key="none", max_retries=0)


def _reply(client, messages, max_tokens=12, **kwargs) -> anthropic.types.Message:
    return client.messages.create(
        model=MODEL, messages=messages, max_tokens=max_tokens, extra_body=GREEDY, **kwargs
    )


def _prompt_tokens(message) -> int:
    """The whole prompt: Anthropic's usage counts tokens read from its cache apart."""
    u = message.usage
    return u.input_tokens + (u.cache_read_input_tokens or 0) + (u.cache_creation_input_tokens or 0)


def _text(message) -> str:
    return "".join(b.text for b in message.content if b.type == "text")


def test_multi_turn_with_system_and_stop(backend, client):
    first = _reply(client, [{"role": "user", "content": "Hi."}], system=SYSTEM)
    text = _text(first)
    history = [
        {"role": "user", "content": "Hi."},
        {"role": "assistant", "content": text},
        {"role": "user", "content": "More."},
    ]
    free = _text(_reply(client, history, system=SYSTEM))
    usable = [c for c in free[1:] if c.strip() and c != "\ufffd"]
    stop = usable[0] if usable else "\n"  # a stop sequence the answer reaches, if it has one

    @sgl.function
    def chat(s):
        s += sgl.system(SYSTEM)
        s += sgl.user("Hi.")
        s += sgl.assistant(sgl.gen("one", max_tokens=12))
        s += sgl.user("More.")
        s += sgl.assistant(sgl.gen("two", max_tokens=12, stop=stop))

    state = chat.run(backend=backend, temperature=0)
    assert state["one"] == text
    second = _reply(client, history, system=SYSTEM, stop_sequences=[stop])
    assert state["two"] == _text(second)
    assert second.stop_reason == ("stop_sequence" if usable else second.stop_reason)
    finish = state.get_meta_info("two")["finish_reason"]
    assert finish.get("matched") == second.stop_sequence
    assert [m["role"] for m in state.messages()] == ["system", "user", "assistant", "user", "assistant"]
    assert (backend.token_usage.prompt_tokens, backend.token_usage.completion_tokens) == (
        _prompt_tokens(first) + _prompt_tokens(second),
        first.usage.output_tokens + second.usage.output_tokens,
    )


def test_program_without_roles_is_one_user_message(backend, client):
    @sgl.function
    def plain(s):
        s += "Tell me a story." + sgl.gen("story", max_tokens=10)

    state = plain.run(backend=backend, temperature=0)
    assert state["story"] == _text(_reply(client, [{"role": "user", "content": "Tell me a story."}], 10))


def test_assistant_prefill(backend, client):
    @sgl.function
    def prefilled(s):
        s += sgl.user("Name a color.")
        s += sgl.assistant("The color is" + sgl.gen("color", max_tokens=8))

    state = prefilled.run(backend=backend, temperature=0)
    messages = [
        {"role": "user", "content": "Name a color."},
        {"role": "assistant", "content": "The color is"},
    ]
    assert state["color"] == _text(_reply(client, messages, 8))


def test_streaming_adds_up_to_the_answer(backend, client):
    @sgl.function
    def chat(s):
        s += sgl.user("Hi.")
        s += sgl.assistant(sgl.gen("answer", max_tokens=12))

    state = chat.run(backend=backend, temperature=0, stream=True)
    chunks = list(state.text_iter("answer"))
    reply = _reply(client, [{"role": "user", "content": "Hi."}])
    assert "".join(chunks) == state["answer"] == _text(reply)
    assert backend.token_usage.completion_tokens == reply.usage.output_tokens


def test_select_and_unsupported_options_raise(backend):
    @sgl.function
    def pick(s):
        s += sgl.user("Yes or no?")
        s += sgl.assistant(sgl.select("answer", choices=["yes", "no"]))

    with pytest.raises(ProgramError, match="does not support select") as info:
        pick.run(backend=backend)
    assert isinstance(info.value.__cause__, UnsupportedFeatureError)

    @sgl.function
    def constrained(s):
        s += sgl.user("A number?")
        s += sgl.assistant(sgl.gen("n", regex=r"\d+"))

    with pytest.raises(ProgramError, match="does not support regex"):
        constrained.run(backend=backend)
