"""The language's plumbing against a deterministic fake backend (fast, no model)."""

from __future__ import annotations

import asyncio
import json

import pytest

import radixlm as sgl
from tests.frontend import programs
from tests.frontend.fake_backend import FakeBackend, prompts


@pytest.fixture
def fake():
    return FakeBackend(canned={"Q: hi\nA:": " hello there\nmore"})


def test_variables_text_and_meta(fake):
    @sgl.function
    def qa(s, q):
        s += "Q: " + q + "\nA:"
        s += sgl.gen("a", max_tokens=8, stop="\n")

    state = qa.run(q="hi", backend=fake, temperature=0)
    assert state["a"] == " hello there"
    assert state.text() == "Q: hi\nA: hello there"
    assert state.get_meta_info("a")["prompt_tokens"] > 0
    assert "a" in state and state.error() is None


def test_gen_params_reach_the_request(fake):
    @sgl.function
    def prog(s):
        s += "x" + sgl.gen(
            "a",
            max_tokens=3,
            min_tokens=1,
            stop=["\n"],
            stop_token_ids=[7],
            temperature=0.5,
            top_p=0.9,
            top_k=5,
            min_p=0.1,
            frequency_penalty=0.2,
            presence_penalty=0.3,
            ignore_eos=True,
            return_logprob=True,
            logprob_start_len=0,
            top_logprobs_num=2,
            return_text_in_logprobs=True,
            json_schema={"type": "object"},
        )

    prog.run(backend=fake, execution="interpreter")
    req = fake.requests[-1]
    sp = req["sampling_params"]
    assert sp["max_new_tokens"] == 3 and sp["min_new_tokens"] == 1 and sp["stop"] == ["\n"]
    assert sp["stop_token_ids"] == [7] and sp["temperature"] == 0.5 and sp["top_k"] == 5
    assert json.loads(sp["json_schema"]) == {"type": "object"}
    assert req["return_logprob"] and req["top_logprobs_num"] == 2 and req["logprob_start_len"] == 0


def test_gen_int_and_string_set_dtype(fake):
    @sgl.function
    def prog(s):
        s += "n:" + sgl.gen_int("n") + " s:" + sgl.gen_string("t", max_tokens=2)

    state = prog.run(backend=fake, execution="interpreter")
    assert state["n"].isdigit()
    assert [r["sampling_params"].get("dtype") for r in fake.requests] == ["int", "str"]


def test_roles_messages_and_default_system_prompt(fake):
    state = programs.multi_turn.run(question_1="Hi.", question_2="Bye.", backend=fake, temperature=0)
    msgs = state.messages()
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant"]
    assert msgs[1]["content"] == "Hi." and msgs[2]["content"] == state["answer_1"]
    assert state.text().startswith(
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi."
    )
    # Without a system turn, the template's own system prompt comes first, as in training.
    state = programs.role_blocks.run(question="Q?", backend=fake)
    assert state.text().startswith(
        "<|im_start|>system\nYou are a test model.<|im_end|>\n<|im_start|>user\nQ?<|im_end|>"
    )
    assert state.messages()[0] == {"role": "user", "content": "Q?"}


def test_named_template_overrides_the_servers():
    fake = FakeBackend(chat_template="llama-3")
    state = programs.role_blocks.run(question="Q?", backend=fake)
    assert state.text().startswith("<|start_header_id|>user<|end_header_id|>\n\nQ?<|eot_id|>")


def test_fork_join_gathers_variables_and_prefills_the_prefix(fake):
    state = programs.tree.run(topic="tea", backend=fake, execution="interpreter")
    assert isinstance(state["idea"], list) and len(state["idea"]) == 3
    assert f"Best idea: {state['idea'][0]}\nSummary:" in state.text()
    prefills = [r for r in fake.requests if r["sampling_params"] == {"max_new_tokens": 0}]
    assert prefills and prompts(prefills[0]) == ["Write about tea.\n"]


def test_fork_concate_and_append(fake):
    @sgl.function
    def prog(s):
        s += "A"
        forks = s.fork(2)
        forks += lambda i: f"-{i}"
        forks.join(mode="concate_and_append")

    assert prog.run(backend=fake).text() == "A-0-1"


def test_streaming_chunks_concatenate_to_the_final_text(fake):
    state = programs.few_shot_qa.run(question="What?", backend=fake, stream=True, temperature=0)
    chunks = list(state.text_iter())
    assert len(chunks) > 3
    assert "".join(chunks) == state.text()
    state = programs.few_shot_qa.run(question="What?", backend=fake, stream=True, temperature=0)
    assert "".join(state.text_iter("answer")) == state["answer"]


def test_async_text_iter(fake):
    async def main():
        state = programs.few_shot_qa.run(question="What?", backend=fake, stream=True)
        return state, [c async for c in state.text_async_iter()]

    state, chunks = asyncio.run(main())
    assert "".join(chunks) == state.text()


@pytest.mark.parametrize("execution", ["interpreter", "graph"])
def test_errors_raise_with_their_cause(execution):
    fake = FakeBackend(fail_on="boom")

    @sgl.function
    def prog(s, q):
        s += q + sgl.gen("a", max_tokens=4)

    with pytest.raises(sgl.ProgramError) as info:
        prog.run(q="boom", backend=fake, execution=execution)
    assert isinstance(info.value.__cause__, RuntimeError) and "fake failure" in str(info.value.__cause__)


def test_error_surfaces_from_getitem_and_stream(fake):
    fake.fail_on = "boom"
    state = programs.few_shot_qa.run(question="boom", backend=fake, stream=True)
    with pytest.raises(sgl.ProgramError):
        state["answer"]
    assert isinstance(state.error(), RuntimeError)
    with pytest.raises(sgl.ProgramError):
        list(state.text_iter())


def test_errors_in_run_batch_raise_after_all_finish():
    fake = FakeBackend(fail_on="boom")
    with pytest.raises(sgl.ProgramError) as info:
        programs.few_shot_qa.run_batch([{"question": "ok"}, {"question": "boom"}], backend=fake)
    assert "#1" in str(info.value) and isinstance(info.value.__cause__, sgl.ProgramError)


def test_bind(fake):
    bound = programs.multi_turn.bind(question_1="Hi.")
    state = bound.run(question_2="Bye.", backend=fake)
    assert state.messages()[1]["content"] == "Hi."
    with pytest.raises(TypeError):
        programs.multi_turn.bind(nope=1)


@pytest.mark.parametrize("execution", ["auto", "interpreter"])
def test_run_batch_keeps_order(fake, execution, capsys):
    questions = [f"question {i}?" for i in range(12)]
    states = programs.few_shot_qa.run_batch(
        [{"question": q} for q in questions],
        backend=fake,
        temperature=0,
        progress_bar=True,
        execution=execution,
    )
    singles = [programs.few_shot_qa.run(question=q, backend=fake, temperature=0)["answer"] for q in questions]
    assert [s["answer"] for s in states] == singles
    assert "12/12" in capsys.readouterr().err


def test_run_batch_warms_the_shared_prefix(fake):
    programs.few_shot_qa.run_batch([{"question": "a?"}, {"question": "b?"}], backend=fake, num_threads=2)
    first = fake.requests[0]
    assert first["sampling_params"] == {"max_new_tokens": 0}
    assert first["input_segments"] == [
        {
            "text": "The following are questions with answers.\n\n"
            "Q: What is the capital of France?\nA: Paris\n\n"
            "Q: What is the capital of Germany?\nA: Berlin\n\nQ: "
        }
    ]


def test_run_batch_generator_style(fake):
    gen = programs.few_shot_qa.run_batch(
        [{"question": "a?"}, {"question": "b?"}], backend=fake, generator_style=True
    )
    assert [s.execution_path for s in gen] == ["graph", "graph"]


def test_async_api(fake):
    async def main():
        one = await programs.few_shot_qa.arun(question="x?", backend=fake, temperature=0)
        many = await programs.few_shot_qa.arun_batch(
            [{"question": f"{i}?"} for i in range(5)], backend=fake, temperature=0
        )
        dyn = await programs.reads_generated_value.arun(question="x?", backend=fake, temperature=0)
        return one, many, dyn

    one, many, dyn = asyncio.run(main())
    assert one["answer"] == programs.few_shot_qa.run(question="x?", backend=fake, temperature=0)["answer"]
    assert [s["answer"] for s in many] == [
        programs.few_shot_qa.run(question=f"{i}?", backend=fake, temperature=0)["answer"] for i in range(5)
    ]
    assert one.execution_path == "graph" and dyn.execution_path == "interpreter"


def test_run_and_arun_share_the_execution_rules():
    no_graphs = FakeBackend(graphs=False)
    with pytest.raises(sgl.UnsupportedFeatureError):
        programs.few_shot_qa.run(question="x?", backend=no_graphs, execution="graph")
    with pytest.raises(sgl.UnsupportedFeatureError):
        asyncio.run(programs.few_shot_qa.arun(question="x?", backend=no_graphs, execution="graph"))
    with pytest.raises(ValueError, match="execution must be one of"):
        asyncio.run(programs.few_shot_qa.arun(question="x?", backend=no_graphs, execution="bogus"))
    state = asyncio.run(programs.few_shot_qa.arun(question="x?", backend=no_graphs, temperature=0))
    assert state.execution_path == "interpreter" and no_graphs.graph_runs == 0


@pytest.mark.parametrize("prog,kwargs", programs.STATIC_CASES)
def test_interpreter_and_graph_agree(fake, prog, kwargs):
    interp = prog.run(backend=fake, temperature=0, execution="interpreter", **kwargs)
    graph = prog.run(backend=fake, temperature=0, execution="graph", **kwargs)
    assert graph.execution_path == "graph" and interp.execution_path == "interpreter"
    assert graph.text() == interp.text()
    assert graph.messages() == interp.messages()
    assert graph.executor.variables == interp.executor.variables


def test_dynamic_program_is_detected_and_interpreted(fake):
    ir = programs.reads_generated_value.trace(question="q")
    assert not ir.is_static and "'in'" in ir.dynamic_reason
    state = programs.reads_generated_value.run(question="q", backend=fake, temperature=0)
    assert state.execution_path == "interpreter" and fake.graph_runs == 0
    with pytest.raises(sgl.DynamicProgramError):
        programs.reads_generated_value.run(question="q", backend=fake, execution="graph")


def test_static_program_uses_one_graph_run(fake):
    state = programs.tree.run(topic="tea", backend=fake)
    assert state.execution_path == "graph" and fake.graph_runs == 1


def test_trace_prints_ir_and_dot():
    ir = programs.tree.trace(topic="tea")
    text = str(ir)
    assert "'Write about tea.\\n'" in text and "fork(s0)" in text and "join(s0, [s1, s2, s3]" in text
    assert "var(1.idea.0)" in text
    dot = ir.to_dot()
    assert dot.startswith('digraph "tree"') and "style=dashed" in dot


def test_compiled_graph_is_json(fake):
    graph = programs.tree.compile(topic="tea", backend=fake, temperature=0).graph
    assert json.loads(json.dumps(graph)) == graph
    ops = [n["op"]["type"] for n in graph["nodes"] if n["op"]]
    assert ops == ["prefill", "gen", "gen", "gen", "gen"]
    summary = graph["nodes"][-1]
    assert {"var": "idea", "node": 1} in summary["extend"]  # fork 0's gen


def test_select_scores_in_one_batch_and_handles_leading_spaces(fake):
    @sgl.function
    def prog(s):
        s += "Is it? Answer:" + sgl.select("c", choices=["yes", " yes", " no"])

    state = prog.run(backend=fake)
    batches = [r for r in fake.requests if len(prompts(r)) > 1]
    assert len(batches) == 1 and batches[0]["sampling_params"] == {"max_new_tokens": 0}
    meta = state.get_meta_info("c")
    assert [[e[2] for e in es] for es in meta["input_token_logprobs"]] == [["yes"], [" yes"], [" no"]]
    scores = meta["normalized_prompt_logprobs"]
    assert state["c"] == ["yes", " yes", " no"][scores.index(max(scores))]


def test_select_boundary_merging_with_the_prefix(fake):
    @sgl.function
    def prog(s):
        s += "The word is fo" + sgl.select("c", choices=["o", "x bar"])

    meta = prog.run(backend=fake).get_meta_info("c")
    # "fo" + "o" tokenizes as " foo": the merged token is the choice's first scored token.
    assert [[e[2] for e in es] for es in meta["input_token_logprobs"]] == [[" foo"], [" fox", " bar"]]


@pytest.mark.parametrize(
    "method",
    [sgl.token_length_normalized, sgl.greedy_token_selection, sgl.unconditional_likelihood_normalized],
)
def test_choice_methods(fake, method):
    @sgl.function
    def prog(s):
        s += "Pick:" + sgl.gen("c", choices=[" red", " green apple", " blue"], choices_method=method)

    state = prog.run(backend=fake)
    assert state["c"] in (" red", " green apple", " blue")
    meta = state.get_meta_info("c")
    needs_unconditional = method is sgl.unconditional_likelihood_normalized
    assert (meta["unconditional_token_logprobs"] is not None) == needs_unconditional


def test_choice_method_math():
    lps = [[-1.0, -3.0], [-1.0], [-2.0]]
    assert sgl.token_length_normalized.decide(lps)[0] == 1
    assert sgl.greedy_token_selection.decide([[-1.0, -0.5], [-1.0], [-2.0]])[0] == 0
    idx, scores = sgl.unconditional_likelihood_normalized.decide(
        [[-1.0, -1.0], [-0.5]], [[-9.0, -0.1], [-0.1]]
    )
    assert idx == 1 and scores == [pytest.approx(-0.95), pytest.approx(-0.5)]


def test_image_raises_a_clear_error_on_text_models(fake):
    @sgl.function
    def prog(s):
        s += sgl.user(sgl.image("cat.png") + "What is this?")

    with pytest.raises(sgl.ProgramError) as info:
        prog.run(backend=fake)
    assert isinstance(info.value.__cause__, sgl.UnsupportedFeatureError)
    assert "image inputs" in str(info.value.__cause__) and "text-only" in str(info.value.__cause__)


def test_openai_backend_names_the_unsupported_feature():
    backend = sgl.OpenAI("gpt-4o-mini", base_url="http://127.0.0.1:9/v1", api_key="x")
    with pytest.raises(sgl.ProgramError) as info:
        programs.extract.run(text="Bob is 30.", backend=backend)
    assert isinstance(info.value.__cause__, sgl.UnsupportedFeatureError)
    assert "OpenAI backend does not support dtype" in str(info.value.__cause__)

    @sgl.function
    def regex_prog(s):
        s += sgl.assistant(sgl.gen("x", regex="[0-9]+"))

    with pytest.raises(sgl.ProgramError, match="regex"):
        regex_prog.run(backend=backend)


def test_default_backend_and_server_calls(fake):
    sgl.set_default_backend(fake)
    try:
        assert programs.few_shot_qa.run(question="x?")["answer"]
        assert sgl.flush_cache() is True
        assert "requests" in sgl.get_server_info()
    finally:
        sgl.frontend.default_backend._default_backend = None
    with pytest.raises(ValueError, match="set_default_backend"):
        programs.few_shot_qa.run(question="x?")


def test_set_var_get_var_and_finished_state(fake):
    @sgl.function
    def prog(s):
        s["greeting"] = "hello"
        s += s["greeting"] + sgl.gen("a", max_tokens=2)

    state = prog.run(backend=fake)
    assert state.get_var("greeting") == "hello" and state.text().startswith("hello")
    state.set_var("x", 1)
    assert state["x"] == 1
    with pytest.raises(RuntimeError, match="finished"):
        state += "more"


def test_program_exceptions_propagate_unchanged(fake):
    @sgl.function
    def prog(s):
        s += "x"
        raise KeyError("mine")

    with pytest.raises(KeyError, match="mine"):
        prog.run(backend=fake)


def test_import_is_light():
    import subprocess
    import sys

    code = "import sys, radixlm; assert 'torch' not in sys.modules, 'torch imported'; radixlm.Engine"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
