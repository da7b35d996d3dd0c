"""The language on the default model (SmolLM2-135M-Instruct) in an in-process Engine."""

from __future__ import annotations

import re

import pytest

import radixlm as sgl
from tests.frontend import programs
from tests.helpers.engines import make_engine

pytestmark = pytest.mark.real_model


@pytest.fixture(scope="module")
def backend(real_model_dir):
    eng = make_engine(real_model_dir, kv_cache_gb=0.2)
    yield sgl.EngineBackend(eng)
    eng.shutdown()


def test_select_picks_the_fact_with_and_without_leading_space(backend):
    @sgl.function
    def capital(s, sep, choices):
        s += "Q: What is the capital of France?\nA: The capital of France is" + sep
        s += sgl.select("city", choices=choices)

    spaced = capital.run(sep="", choices=[" Berlin", " Paris", " Rome"], backend=backend)
    assert spaced["city"] == " Paris"
    bare = capital.run(sep=" ", choices=["Berlin", "Paris", "Rome"], backend=backend)
    assert bare["city"] == "Paris"
    # "is " + "Paris" tokenizes as "is" + " Paris": the merged token is scored as the choice's.
    first_tokens = [es[0][2] for es in bare.get_meta_info("city")["input_token_logprobs"]]
    assert first_tokens == [" Berlin", " Paris", " Rome"]


def test_chat_uses_the_models_template_and_paths_agree(backend):
    kwargs = dict(question_1="What is 2+2?", question_2="And 3+3?")
    graph = programs.multi_turn.run(backend=backend, temperature=0, **kwargs)
    interp = programs.multi_turn.run(backend=backend, temperature=0, execution="interpreter", **kwargs)
    assert graph.executor.variables == interp.executor.variables and graph.text() == interp.text()
    state = programs.role_blocks.run(question="Say hi.", backend=backend, temperature=0)
    assert state.text().startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert state["answer"].strip()


def test_typed_and_regex_generation(backend):
    state = programs.extract.run(text="Alice is 31 years old.", backend=backend, temperature=0)
    assert re.fullmatch(r"-?\d+", state["age"].strip())
    assert re.fullmatch(r" [A-Z][a-z]+", state["name"])


def test_streaming_on_the_default_model(backend):
    state = programs.few_shot_qa.run(
        question="What is the capital of Spain?", backend=backend, stream=True, temperature=0
    )
    chunks = list(state.text_iter("answer"))
    assert chunks and "".join(chunks) == state["answer"]
    assert "Madrid" in state["answer"]
    state = programs.multi_turn.run(
        question_1="Tell me about Spain.",
        question_2="And Italy?",
        backend=backend,
        stream=True,
        temperature=0,
    )
    chunks = list(state.text_iter())
    assert len(chunks) > 8 and "".join(chunks) == state.text()
