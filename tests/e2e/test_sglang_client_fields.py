"""The real SGLang 0.5.2 frontend reads our server's logprob fields and model info as it reads SGLang's,
and the same program renders the same prompt under its client and ours for every named chat template.

The SGLang programs run in SGLang's own venv (see ``test_sglang_client.py``); ours run here on
``import radixlm as sgl`` against the same server.
"""

from __future__ import annotations

import json
import subprocess
import textwrap

import pytest

import radixlm as sgl
from radixlm.runtime.server.launch import launch_server
from tests.e2e.test_sglang_client import sglang_python  # noqa: F401 - the venv fixture

# Every SGLang template name a text-only program can use, with a system turn and without.
TEMPLATES = [
    "default",
    "claude",
    "chatml",
    "qwen",
    "vicuna_v1.1",
    "llama-2-chat",
    "mistral",
    "llama-3-instruct",
    "llama-4",
    "yi-1.5",
    "gemma-it",
    "dbrx-instruct",
    "c4ai-command-r",
    "granite-3-instruct",
    "deepseek-v3",
    "glm-4v",
]

CHAT_PROGRAMS = """
@sgl.function
def with_system(s):
    s += sgl.system("Be brief.")
    s += sgl.user("Hi there")
    s += sgl.assistant("Hello! How can I help?")
    s += sgl.user("And?")
    s += sgl.assistant(sgl.gen("a", max_tokens=3, temperature=0))

@sgl.function
def without_system(s):
    s += sgl.user("Hello")
    s += sgl.assistant(sgl.gen("a", max_tokens=3, temperature=0))

def render_all(url, names):
    # per template and program: the prompt the generation continued, and what it generated
    out = {}
    for name in names:
        backend = sgl.RuntimeEndpoint(url, chat_template_name=name)
        out[name] = []
        for program in (with_system, without_system):
            state = program.run(backend=backend)
            text, answer = state.text(), state["a"]
            prompt = text[: text.rindex(answer)] if answer else text
            out[name].append([prompt, answer])
    return out
"""

SGLANG_SCRIPT = (
    textwrap.dedent("""
    import json, sys
    import sglang as sgl
    from sglang.lang.chat_template import get_chat_template_by_model_path

    url, names = sys.argv[1], json.loads(sys.argv[2])
    """)
    + CHAT_PROGRAMS
    + textwrap.dedent("""
    @sgl.function
    def cot(s):
        s += "Question: 2 + 2 ="
        fork = s.fork(1)[0]
        fork += sgl.gen("top", max_tokens=0, return_logprob=True, top_logprobs_num=3,
                        return_text_in_logprobs=True)
        s += sgl.gen("answer", max_tokens=2, temperature=0)
        s.set_var("top", fork.get_meta_info("top"))

    @sgl.function
    def pick(s, method):
        s += "My favourite colour is"
        s += sgl.select("colour", choices=[" red", " green", " blue"], choices_method=method)

    out = {"prompts": render_all(url, names)}
    backend = sgl.RuntimeEndpoint(url)
    sgl.set_default_backend(backend)
    out["model_path"] = backend.get_model_name()
    out["inferred_template"] = backend.get_chat_template().name
    assert backend.get_chat_template().name == get_chat_template_by_model_path(out["model_path"]).name
    out["cot_top"] = cot.run().get_var("top")["output_top_logprobs"]
    for name, method in [("unconditional", sgl.unconditional_likelihood_normalized),
                         ("greedy", sgl.greedy_token_selection),
                         ("normalized", sgl.token_length_normalized)]:
        state = pick.run(method=method)
        out[name] = {"choice": state["colour"], "meta": state.get_meta_info("colour")}
    print("RESULT " + json.dumps(out))
    """)
)


@pytest.fixture(scope="module")
def server(tiny_llama_dir):
    with launch_server(
        # dbrx-instruct's built-in system prompt alone is some 1000 byte tokens
        model=tiny_llama_dir,
        device="cpu",
        num_threads=1,
        kv_cache_gb=0.1,
        context_length=2048,
    ) as handle:
        yield handle


@pytest.fixture(scope="module")
def sglang_out(sglang_python, server, tmp_path_factory) -> dict:  # noqa: F811 - the fixture above
    script = tmp_path_factory.mktemp("sglang") / "fields.py"
    script.write_text(SGLANG_SCRIPT)
    run = subprocess.run(
        [sglang_python, str(script), server.url, json.dumps(TEMPLATES)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, f"stderr:\n{run.stderr[-4000:]}\nserver log:\n{server.log()[-2000:]}"
    line = next(s for s in run.stdout.splitlines() if s.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def test_same_program_same_prompt_under_both_clients(sglang_out, server):
    namespace: dict = {"sgl": sgl}
    exec(compile(CHAT_PROGRAMS, "chat_programs", "exec"), namespace)  # the very same program text
    ours = namespace["render_all"](server.url, TEMPLATES)
    for name in TEMPLATES:
        assert ours[name] == sglang_out["prompts"][name], name


def test_the_real_client_reads_model_path_as_given(sglang_out, tiny_llama_dir):
    assert sglang_out["model_path"] == tiny_llama_dir
    assert sglang_out["inferred_template"] == "default"  # SGLang infers nothing from a directory name


def test_the_real_client_reads_next_token_top_logprobs(sglang_out):
    (top,) = sglang_out["cot_top"]
    assert len(top) == 3
    for lp, tid, text in top:
        assert isinstance(lp, float) and isinstance(tid, int) and isinstance(text, str)
    assert [e[0] for e in top] == sorted((e[0] for e in top), reverse=True)


def test_the_real_client_selects_with_every_method(sglang_out):
    for name in ("unconditional", "greedy", "normalized"):
        assert sglang_out[name]["choice"] in (" red", " green", " blue")
    greedy = sglang_out["greedy"]["meta"]
    assert len(greedy["greedy_logprob_matrix"]) == 3 and len(greedy["output_token_logprobs"]) == 3
    unconditional = sglang_out["unconditional"]["meta"]
    # SGLang's default start: each unconditional answer is the one (None) entry of the last token
    for entries, choice_entries in zip(
        unconditional["unconditional_token_logprobs"], unconditional["input_token_logprobs"]
    ):
        assert entries == [[None, choice_entries[-1][1], None]]
    assert len(unconditional["normalized_unconditional_prompt_logprobs"]) == 3
