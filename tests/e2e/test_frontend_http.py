"""The language over HTTP against one real local server (tiny random model): ``Runtime``,
``RuntimeEndpoint``, ``POST /program``, ``input_segments``, pins, and ``OpenAI`` on our own ``/v1``."""

from __future__ import annotations

import httpx
import pytest

import radixlm as sgl
from tests.frontend import programs
from tests.helpers.waiting import wait_until


@pytest.fixture(scope="module")
def runtime(tiny_llama_dir):
    rt = sgl.Runtime(
        model=tiny_llama_dir,
        device="cpu",
        num_threads=1,
        kv_cache_gb=0.02,
        context_length=512,
        debug_invariants=True,
        log_level="info",
    )
    yield rt
    rt.shutdown()


@pytest.fixture(scope="module")
def endpoint(runtime):
    return sgl.RuntimeEndpoint(runtime.url)


@pytest.fixture()
def client(runtime):
    with httpx.Client(base_url=runtime.url, timeout=60) as c:
        yield c


def stats(backend) -> dict:
    return backend.get_server_info()["stats"]


def wait_idle(backend) -> dict:
    """Stats once nothing runs (pins all released); asserts that no KV slot leaked."""
    last: dict = {}

    def idle() -> dict | None:
        last.update(stats(backend))
        busy = ("num_running", "num_queued", "kv_used", "num_pinned_contexts")
        return dict(last) if not any(last[key] for key in busy) else None

    s = wait_until(idle, 15, lambda: f"the server to go idle (last stats: {last})")
    assert s["kv_free"] + s["kv_cached"] == s["kv_total"]
    return s


@pytest.mark.parametrize("prog,kwargs", programs.STATIC_CASES)
def test_typical_programs_same_over_program_endpoint_and_interpreter(endpoint, runtime, prog, kwargs):
    interp = prog.run(backend=endpoint, temperature=0, execution="interpreter", **kwargs)
    graph = prog.run(backend=endpoint, temperature=0, **kwargs)
    assert graph.execution_path == "graph" and endpoint._has_program_endpoint  # no fallback
    assert graph.executor.variables == interp.executor.variables
    assert graph.text() == interp.text() and graph.messages() == interp.messages()
    assert 'POST /program HTTP/1.1" 200' in runtime._server.log()
    wait_idle(endpoint)


def test_generated_tokens_continue_exactly(endpoint):
    @sgl.function
    def two(s):
        s += "Start:" + sgl.gen("a", max_tokens=8, ignore_eos=True) + sgl.gen("b", max_tokens=2)

    sgl.flush_cache(endpoint)
    states = [
        two.run(backend=endpoint, temperature=0, execution="interpreter"),
        two.run(backend=endpoint, temperature=0, execution="graph"),
        two.run(backend=endpoint, temperature=0, stream=True),
    ]
    for state in states:
        state.sync()
        a, b = state.get_meta_info("a"), state.get_meta_info("b")
        # b's prompt is a's prompt plus exactly the 8 tokens a generated (random bytes: their text
        # would not re-encode to them), and all but the last of them are already in the cache.
        assert b["prompt_tokens"] == a["prompt_tokens"] + 8
        assert b["cached_tokens"] >= a["prompt_tokens"] + 7
    assert states[0].executor.variables == states[1].executor.variables == states[2].executor.variables


@pytest.mark.parametrize("execution", ["interpreter", "graph"])
def test_sixteen_forks_compute_the_context_once(endpoint, execution):
    context = "".join(f"line {i:03d} of a long shared context.\n" for i in range(7))[:200]

    @sgl.function
    def many(s, ctx):
        s += ctx
        forks = s.fork(16)
        forks += lambda i: f"Branch {i}:" + sgl.gen("x", max_tokens=2)
        forks.join()

    sgl.flush_cache(endpoint)
    state = many.run(ctx=context, backend=endpoint, temperature=0, execution=execution)
    assert state.execution_path == execution
    metas = state.get_meta_info("x")
    assert len(metas) == 16 and all(m["cached_tokens"] >= 200 for m in metas), [
        m["cached_tokens"] for m in metas
    ]
    assert sum(m["prompt_tokens"] - m["cached_tokens"] for m in metas) < 16 * 12
    wait_idle(endpoint)


def test_runtime_backend_streams_and_batches(runtime):
    state = programs.multi_turn.run(
        question_1="Hi.", question_2="Bye.", backend=runtime, temperature=0, stream=True
    )
    chunks = list(state.text_iter())
    assert "".join(chunks) == state.text()
    assert [m["role"] for m in state.messages()] == ["system", "user", "assistant", "user", "assistant"]
    questions = [f"q{i}?" for i in range(4)]
    singles = [
        programs.few_shot_qa.run(question=q, backend=runtime, temperature=0)["answer"] for q in questions
    ]
    batch = programs.few_shot_qa.run_batch(
        [{"question": q} for q in questions], backend=runtime, temperature=0
    )
    assert [s["answer"] for s in batch] == singles and all(s.execution_path == "graph" for s in batch)


def test_input_segments_tokenize_each_text_piece(client):
    ids = client.post(
        "/generate",
        json={"text": "ab", "sampling_params": {"max_new_tokens": 3, "temperature": 0, "ignore_eos": True}},
    ).json()
    seg = client.post(
        "/generate",
        json={
            "input_segments": [{"text": "a"}, {"ids": []}, {"text": "b"}],
            "sampling_params": {"max_new_tokens": 3, "temperature": 0, "ignore_eos": True},
        },
    ).json()
    assert seg["output_ids"] == ids["output_ids"] and seg["meta_info"]["prompt_tokens"] == 2
    batch = client.post(
        "/generate",
        json={
            "input_segments": [[{"text": "ab"}], [{"text": "a"}, {"ids": ids["output_ids"][:1]}]],
            "sampling_params": {"max_new_tokens": 0},
        },
    ).json()
    assert [b["meta_info"]["prompt_tokens"] for b in batch] == [2, 2]


@pytest.mark.parametrize(
    "body,fragment",
    [
        ({"input_segments": []}, "non-empty list of segments"),
        ({"input_segments": [{"text": 1}]}, "input_segments[0] must be"),
        ({"input_segments": [{"text": "a", "ids": [1]}]}, "input_segments[0] must be"),
        ({"input_segments": [[{"text": "a"}], [{"bytes": "b"}]]}, "input_segments[1][0] must be"),
        ({"input_segments": [{"ids": [99999]}]}, "vocabulary"),
        ({"input_segments": [{"text": ""}]}, "empty"),
        (
            {"input_segments": [{"text": "a"}], "text": "a"},
            "exactly one of text and input_ids (or input_segments)",
        ),
        ({"text": "a", "pin_children": -1}, "set by the server for /program requests only"),
        ({"text": "a", "pin_children": 2, "sampling_params": {"n": 2}}, "set by the server"),
        ({"text": "a", "unpin_rids": "r"}, "unpin_rids: set by the server"),
        ({"text": ["a", "b"], "unpin_rids": ["r"]}, "unpin_rids: set by the server"),
    ],
)
def test_malformed_program_fields_are_400s(client, body, fragment):
    r = client.post("/generate", json=body)
    assert r.status_code == 400 and fragment in r.json()["error"]["message"]


def test_pins_hold_until_the_children_are_admitted(client, endpoint):
    """Pins are the server's: a client's /generate may not set them; a /program's forks pin their
    parent's context until every child is admitted, then nothing stays pinned."""
    greedy = {"max_new_tokens": 2, "temperature": 0}
    wait_idle(endpoint)
    r = client.post("/generate", json={"text": "p", "pin_children": 2, "sampling_params": greedy})
    assert r.status_code == 400 and "set by the server" in r.text
    gen = {"type": "gen", "name": "x", "options": greedy}
    nodes = [{"id": 0, "parent": None, "extend": [{"text": "parent context"}], "op": {**gen, "name": "p"}}]
    nodes += [
        {"id": i, "parent": 0, "extend": [{"text": f" {i}"}], "op": {**gen, "name": f"c{i}"}} for i in (1, 2)
    ]
    r = client.post("/program", json={"graph": {"version": 1, "name": "pins", "nodes": nodes}})
    assert r.status_code == 200, r.text
    wait_idle(endpoint)
    assert stats(endpoint)["num_pinned_contexts"] == 0


def test_openai_backend_against_our_v1(runtime, endpoint):
    model = httpx.get(runtime.url + "/v1/models").json()["data"][0]["id"]
    completion = sgl.OpenAI(model, base_url=runtime.url + "/v1", is_chat_model=False)
    state = programs.few_shot_qa.run(question="What?", backend=completion, temperature=0)
    native = programs.few_shot_qa.run(question="What?", backend=endpoint, temperature=0)
    assert state["answer"] == native["answer"]
    chat = sgl.OpenAI(model, base_url=runtime.url + "/v1")
    state = programs.multi_turn.run(question_1="Hi.", question_2="Bye.", backend=chat, temperature=0)
    reply = chat.client.chat.completions.create(
        model=model, messages=state.messages()[:2], max_tokens=8, temperature=0
    )
    assert state["answer_1"] == reply.choices[0].message.content
    assert [m["role"] for m in state.messages()] == ["system", "user", "assistant", "user", "assistant"]
