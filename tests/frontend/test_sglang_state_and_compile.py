"""SGLang's program-state, tracing and compile API on the fake backend: the paths the two-client e2e
test (tests/e2e/test_sglang_compat_programs.py) does not reach (graph vs interpreter, fallbacks,
settings that change what is sent)."""

from __future__ import annotations

import pytest

import radixlm as sgl
from radixlm.frontend.default_backend import current_default_backend
from radixlm.lang.chat_template import get_chat_template
from radixlm.lang.choices import ChoicesDecision, unconditional_likelihood_normalized
from radixlm.lang.ir import REGEX_INT
from tests.frontend.fake_backend import FakeBackend, prompts


@pytest.fixture
def fake():
    return FakeBackend()


@sgl.function
def scoped(s, item):
    s += "Item: " + item + "\n"
    with s.var_scope("block"):
        s += "Name:" + sgl.gen("name", max_tokens=3) + "\nCount:" + sgl.gen_int("count", max_tokens=2)
    s += "\nEnd" + sgl.gen("tail", max_tokens=2)


def test_var_scope_is_the_same_in_graph_and_interpreter(fake):
    graph = scoped.run(item="pen", backend=fake, temperature=0)
    interp = scoped.run(item="pen", backend=fake, temperature=0, execution="interpreter")
    assert graph.execution_path == "graph" and graph["block"] == interp["block"]
    assert graph["block"] == "Name:" + graph["name"] + "\nCount:" + graph["count"]
    assert graph.text() == "Item: pen\n" + graph["block"] + "\nEnd" + graph["tail"]


def test_reading_a_var_scope_inside_the_program_runs_in_the_interpreter(fake):
    @sgl.function
    def rereads(s):
        with s.var_scope("block"):
            s += "A:" + sgl.gen("a", max_tokens=2)
        s += "\nAgain: " + s["block"]

    state = rereads.run(backend=fake, temperature=0)
    assert state.execution_path == "interpreter"
    assert state.text() == "A:" + state["a"] + "\nAgain: A:" + state["a"]


@sgl.function
def detail(s, point):
    s += "Detail of " + point + ":" + sgl.gen("detail", max_tokens=3)


@sgl.function
def outline(s, topic):
    s += "Topic " + topic + ":" + sgl.gen("point", max_tokens=2)
    sub = detail(point=s["point"])
    s += "\nSo:" + sub["detail"]


def test_called_function_compiles_into_one_graph(fake):
    state = outline.run(topic="tea", backend=fake, temperature=0)
    assert state.execution_path == "graph" and fake.graph_runs == 1
    interp = outline.run(topic="tea", backend=fake, temperature=0, execution="interpreter")
    assert state.text() == interp.text()
    detail_request = next(p for r in fake.requests for p in prompts(r) if p.startswith("Detail of"))
    assert detail_request == "Detail of " + state["point"] + ":"
    assert "s1 = detail()" in str(outline.trace())


def test_called_function_in_the_interpreter_uses_the_running_backend(fake):
    previous, other = current_default_backend(), FakeBackend()
    sgl.set_default_backend(other)
    try:
        outline.run(topic="tea", backend=fake, temperature=0, execution="interpreter")
    finally:
        sgl.set_default_backend(previous)
    assert any(p.startswith("Detail of") for r in fake.requests for p in prompts(r))
    assert other.requests == []


def test_compiled_function_binds_arguments_and_falls_back_when_dynamic(fake):
    compiled = outline.compile(temperature=0)
    assert compiled.graph_for(fake)["arguments"] == ["topic"]
    state = compiled.run(topic="tea", backend=fake)
    assert state.execution_path == "graph"
    assert state.text() == outline.run(topic="tea", backend=fake, temperature=0).text()
    with pytest.raises(TypeError, match="missing argument"):
        compiled.run(backend=fake)

    @sgl.function
    def branches(s, count):
        for i in range(count):  # reads the argument: dynamic
            s += f"{i}:" + sgl.gen(f"x{i}", max_tokens=1)

    compiled = branches.compile()
    assert not compiled.ir.is_static and "range()" in str(compiled.ir.dynamic_reason)
    fallback = compiled.run(count=2, backend=fake, temperature=0)  # run() as usual: traced with the value
    assert set(fallback.executor.variables) == {"x0", "x1"}
    assert fallback.text() == branches.run(count=2, backend=fake, temperature=0).text()


def test_print_graph_dfs_reaches_forks_through_the_join(fake):
    @sgl.function
    def forked(s):
        s += "Start."
        forks = s.fork(2)
        forks += sgl.gen("idea", max_tokens=2)
        forks.join()

    dfs = forked.trace().last_node.print_graph_dfs()
    assert dfs.count("gen('idea'") == 2 and dfs.count("fork_item(") == 2
    assert dfs.splitlines()[-1].endswith("join(gather_variable)")


def test_precache_setting_controls_the_batch_prefill(fake):
    @sgl.function
    def greet(s, name):
        s += "A long shared greeting prefix. " + name + sgl.gen("x", max_tokens=1)

    def prefills() -> int:
        return sum(1 for r in fake.requests if prompts(r) == ["A long shared greeting prefix. "])

    greet.run_batch([{"name": "a"}, {"name": "b"}], backend=fake)
    assert prefills() == 1
    sgl.global_config.enable_precache_with_tracing = False
    try:
        greet.run_batch([{"name": "a"}, {"name": "b"}], backend=fake)
        assert prefills() == 1
    finally:
        sgl.global_config.enable_precache_with_tracing = True


def test_global_config_default_backend_is_the_default_backend(fake):
    previous = current_default_backend()
    sgl.global_config.default_backend = fake
    try:
        assert sgl.get_default_backend() is fake and sgl.global_config.default_backend is fake
        sgl.global_config.default_backend = None
        assert current_default_backend() is None and sgl.global_config.default_backend is None
    finally:
        sgl.set_default_backend(previous)


def test_cache_prefills_the_constant_prefix_only(fake):
    @sgl.function
    def qa(s, question):
        s += "Answer briefly and politely. " + question + sgl.gen("a", max_tokens=1)

    assert qa.cache(fake) == "Answer briefly and politely. "
    assert prompts(fake.requests[-1]) == ["Answer briefly and politely. "]
    assert fake.requests[-1]["sampling_params"] == {"max_new_tokens": 0}


def test_compat_import_paths():
    assert REGEX_INT == sgl.frontend.ir.REGEX_INT
    assert get_chat_template("chatml").name == "chatml"
    with pytest.raises(ValueError, match="unconditional_token_logprobs"):
        unconditional_likelihood_normalized(
            choices=["a"],
            normalized_prompt_logprobs=[0.0],
            input_token_logprobs=[[]],
            output_token_logprobs=[[]],
        )
    decision = sgl.token_length_normalized(
        choices=["a", "b"],
        normalized_prompt_logprobs=[-2.0, -1.0],
        input_token_logprobs=[[[-2.0, 1, "a"]], [[-1.0, 2, "b"]]],
        output_token_logprobs=[[], []],
    )
    assert decision == ChoicesDecision("b", decision.meta_info)


def test_copy_is_a_fork_joined_back(fake):
    @sgl.function
    def aside(s):
        s += "Main."
        with s.copy() as c:
            c += " Aside:" + sgl.gen("note", max_tokens=2)
        s += " Back."

    for execution in ("graph", "interpreter"):
        state = aside.run(backend=fake, temperature=0, execution=execution)
        assert state.text() == "Main. Back." and len(state["note"]) == 1 and state["note"][0]
    assert aside.arg_defaults == [] and outline.arg_names == ["topic"]


def test_backend_model_name_and_template(fake):
    assert fake.get_model_name() == "fake" and fake.get_chat_template() is fake.chat_template


def test_a_called_function_takes_only_the_callers_arguments(fake):
    @sgl.function
    def styled(s, text, style=" (plain)"):
        s += text + style + sgl.gen("out", max_tokens=1)

    @sgl.function
    def caller(s, topic):
        s += "T " + topic + ":" + sgl.gen("t", max_tokens=1)
        styled(text=s["t"])

    compiled = caller.compile()
    assert compiled.graph_for(fake)["arguments"] == ["topic"]  # not the callee's `style`
    assert "' (plain)'" in str(compiled.ir)
