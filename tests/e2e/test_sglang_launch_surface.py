"""What an SGLang user types, against a real local server: ``Runtime(model_path=...)``, argument-less
``compile()`` bound later and run as one request graph, and ``gen(stop_regex=...)``."""

from __future__ import annotations

import re

import pytest

import radixlm as sgl
from radixlm.program.graph_executor import bind_arguments


@pytest.fixture(scope="module")
def runtime(tiny_llama_dir):
    rt = sgl.Runtime(
        model_path=tiny_llama_dir,
        device="cpu",
        num_threads=1,
        kv_cache_gb=0.02,
        context_length=512,
        debug_invariants=True,
    )
    yield rt
    rt.shutdown()


@sgl.function
def answer(s, question):
    s += "Q: " + question + "\nA:"
    s += sgl.gen("a", max_tokens=12, temperature=0, ignore_eos=True)


def test_runtime_takes_model_path(runtime, tiny_llama_dir):
    info = runtime.get_server_info()
    assert info["model"] == str(tiny_llama_dir), info


def test_compile_without_arguments_runs_once_bound(runtime):
    graph = answer.compile(backend=runtime).graph
    assert graph["arguments"] == ["question"]
    result = runtime.run_graph(bind_arguments(graph, question="2+2?"))
    assert result["results"][0]["value"] == answer.run(question="2+2?", backend=runtime)["a"]


def test_gen_stop_regex_cuts_the_variable(runtime):
    @sgl.function
    def story(s, pattern=None):
        s += "Once upon a time"
        s += sgl.gen("x", max_tokens=32, temperature=0, ignore_eos=True, stop_regex=pattern)

    base = story.run(backend=runtime)["x"]
    pos = next(i for i in range(len(base)) if base[i].isascii() and base[i].isprintable())
    state = story.run(pattern=re.escape(base[pos]) + "+", backend=runtime)
    assert state["x"] == base[:pos]
    assert state.get_meta_info("x")["finish_reason"]["type"] == "stop"
