"""Argument-less ``trace()`` / ``compile()`` (missing arguments become placeholders, filled later by
``bind_arguments``) and ``gen(stop_regex=...)`` reaching the request."""

from __future__ import annotations

import pytest

import radixlm as sgl
from radixlm.program.graph_executor import bind_arguments
from tests.frontend.fake_backend import FakeBackend


@sgl.function
def qa(s, question, style="short"):
    s += "Q: " + question + "\nA:"
    s += sgl.gen("answer", max_tokens=8, stop_regex=r"\d+\.")


def test_trace_without_arguments_shows_placeholders():
    ir = qa.trace()
    assert "arg(question)" in str(ir) and ir.is_static


def test_compile_without_arguments_then_bind_and_run():
    fake = FakeBackend(canned={"Q: hi\nA:": " hello"})
    graph = qa.compile(backend=fake, temperature=0).graph
    assert graph["arguments"] == ["question"]
    assert {"arg": "question"} in graph["nodes"][0]["extend"]
    with pytest.raises(ValueError, match="missing \\['question'\\]"):
        bind_arguments(graph)
    with pytest.raises(ValueError, match="unknown \\['nope'\\]"):
        bind_arguments(graph, question="hi", nope=1)
    bound = bind_arguments(graph, question="hi")
    assert "arguments" not in bound and graph["arguments"] == ["question"]  # the original is unchanged
    assert qa.compile(question="hi", backend=fake, temperature=0).graph == bound
    result = fake.run_graph(bound)
    assert result["results"][0]["value"] == " hello"
    gen_request = fake.requests[-1]
    assert gen_request["sampling_params"]["stop_regex"] == r"\d+\."


def test_running_an_unbound_graph_names_the_argument():
    fake = FakeBackend()
    graph = qa.compile(backend=fake).graph
    with pytest.raises(Exception, match="argument 'question' has no value"):
        fake.run_graph(graph)


def test_gen_rejects_a_bad_stop_regex_in_user_code():
    with pytest.raises(Exception, match="missing"):
        sgl.gen("x", stop_regex="(")
