"""``radixlm.LiteLLM`` against our own ``/v1`` (LiteLLM's ``openai/`` provider): each gen equals what the
OpenAI client answers for the same conversation (greedy), streamed or not, with token usage; and
``radixlm.VertexAI``, which is accepted but says what it lacks at first use."""

from __future__ import annotations

import openai
import pytest

import radixlm as sgl
from radixlm.frontend.errors import ProgramError, UnsupportedFeatureError
from tests.frontend.backends.conftest import MODEL


@pytest.fixture()
def backend(api_server, monkeypatch):
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no download of its price list
    return sgl.LiteLLM(f"openai/{MODEL}", base_url=api_server.url + "/v1", api_key="none", max_retries=0)


@pytest.fixture()
def client(api_server):
    return openai.OpenAI(base_url=api_server.url + "/v1", api_key="none", max_retries=0)


@sgl.function
def two_turns(s):
    s += sgl.system("You are terse.")
    s += sgl.user("Hi.")
    s += sgl.assistant(sgl.gen("one", max_tokens=10))
    s += sgl.user("More.")
    s += sgl.assistant(sgl.gen("two", max_tokens=10, stop="\n"))


def test_turns_match_the_openai_client(backend, client):
    state = two_turns.run(backend=backend, temperature=0)
    messages = state.messages()
    first = client.chat.completions.create(model=MODEL, messages=messages[:2], max_tokens=10, temperature=0)
    second = client.chat.completions.create(
        model=MODEL, messages=messages[:4], max_tokens=10, temperature=0, stop="\n"
    )
    assert state["one"] == first.choices[0].message.content
    assert state["two"] == second.choices[0].message.content
    assert messages[2] == {"role": "assistant", "content": state["one"]}
    assert (backend.token_usage.prompt_tokens, backend.token_usage.completion_tokens) == (
        first.usage.prompt_tokens + second.usage.prompt_tokens,
        first.usage.completion_tokens + second.usage.completion_tokens,
    )


def test_streamed_and_roleless(backend, client):
    state = two_turns.run(backend=backend, temperature=0, stream=True)
    streamed = "".join(state.text_iter("one"))
    assert streamed == state["one"] == two_turns.run(backend=backend, temperature=0)["one"]

    @sgl.function
    def plain(s):
        s += "Tell me a story." + sgl.gen("story", max_tokens=8)

    story = plain.run(backend=backend, temperature=0)["story"]
    reply = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Tell me a story."}], max_tokens=8, temperature=0
    )
    assert story == reply.choices[0].message.content


def test_options_litellm_cannot_send_raise(backend):
    @sgl.function
    def constrained(s):
        s += sgl.user("A number?")
        s += sgl.assistant(sgl.gen("n", regex=r"\d+"))

    with pytest.raises(ProgramError, match="LiteLLM backend does not support regex"):
        constrained.run(backend=backend)


def test_vertexai_is_accepted_and_says_what_it_lacks(monkeypatch):
    monkeypatch.delenv("GCP_PROJECT_ID", raising=False)
    backend = sgl.VertexAI("gemini-1.5-pro", safety_settings=None)
    assert backend.get_model_name() == "gemini-1.5-pro"

    @sgl.function
    def chat(s):
        s += sgl.user("Hi.")
        s += sgl.assistant(sgl.gen("answer"))

    with pytest.raises(ProgramError) as info:
        chat.run(backend=backend)
    cause = info.value.__cause__
    assert isinstance(cause, UnsupportedFeatureError)
    for missing in ("google-cloud-aiplatform", "GCP_PROJECT_ID", 'LiteLLM("vertex_ai/gemini-1.5-pro")'):
        assert missing in str(cause)
