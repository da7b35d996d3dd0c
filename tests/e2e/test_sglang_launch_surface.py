"""What an SGLang user types, against a real local server: ``Runtime(model_path=...)``, argument-less
``compile()`` bound later and run as one request graph, ``gen(stop_regex=...)``, and SGLang launch
lines (``python -m radixlm.launch_server`` / ``radixlm serve`` with SGLang's flags)."""

from __future__ import annotations

import json
import re

import pytest
import requests

import radixlm as sgl
from radixlm.program.graph_executor import bind_arguments
from radixlm.runtime.server.launch import ServerHandle, free_port, launch_command


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


# SGLang launch lines as users type them (SGLang's flags only, beside the tiny model's small KV pool).
def _launch(entry: list[str], flags: list[str]) -> ServerHandle:
    port = free_port()
    argv = [*entry, "--host", "127.0.0.1", "--port", str(port), *flags]
    return launch_command(argv, f"http://127.0.0.1:{port}", timeout=300, env={"OMP_NUM_THREADS": "1"})


def test_sglang_launch_line_serves_with_one_warning_per_ignored_flag(tiny_llama_dir):
    ignored = [
        "--trust-remote-code",
        "--disable-overlap-schedule",
        "--enable-torch-compile",
        "--enable-p2p-check",
    ]
    flags = [
        *("--model-path", tiny_llama_dir, "--random-seed", "42", "--mem-fraction-static", "0.8"),
        *("--max-total-tokens", "2048", "--context-length", "512", "--dtype", "float", "--tp", "1"),
        *("--grammar-backend", "xgrammar", "--stream-interval", "4", "--chat-template", "chatml"),
        *("--log-requests", "--log-requests-level", "3"),
        *ignored,
    ]
    with _launch(["-m", "radixlm.launch_server"], flags) as server:
        info = requests.get(server.url + "/get_server_info", timeout=30).json()
        assert (info["seed"], info["dtype"], info["grammar_backend"], info["context_length"]) == (
            42,
            "float32",
            "llguidance",
            512,
        )
        body = {"text": "Digits:", "sampling_params": {"max_new_tokens": 8, "regex": "[0-9]{3}-[0-9]{2}"}}
        out = requests.post(server.url + "/generate", json=body, timeout=120).json()
        assert re.fullmatch("[0-9]{3}-[0-9]{2}", out["text"]), out
        params = {"max_new_tokens": 9, "ignore_eos": True, "temperature": 0}
        whole = requests.post(server.url + "/generate", json={"text": "Hi", "sampling_params": params}).json()
        body = {"text": "Hi", "sampling_params": params, "stream": True}
        with requests.post(server.url + "/generate", json=body, stream=True, timeout=120) as resp:
            lines = [line for line in resp.iter_lines() if line.startswith(b"data: {")]
        chunks = [json.loads(line[6:]) for line in lines]
        # --stream-interval 4: a chunk for the first token, then one each 4 tokens later, then the end
        # (9 tokens): at most 3 chunks. Each chunk carries the newest state when the reader takes it,
        # so under load one may show a token more than when it was marked (seen: [2, 5, 9])
        counts = [c["meta_info"]["completion_tokens"] for c in chunks]
        assert counts[-1] == 9 and len(counts) <= 3 and counts == sorted(set(counts)), counts
        assert chunks[-1]["text"] == whole["text"]
        log = server.log()
    for flag in [*ignored, "--grammar-backend"]:
        assert log.count(f"radixlm serve: warning: {flag} ") == 1, (flag, log[-3000:])
    received = [line for line in log.splitlines() if "radixlm.requests: Receive: " in line]
    finished = [line for line in log.splitlines() if "radixlm.requests: Finish: " in line]
    assert len(received) == len(finished) == 3, log[-3000:]
    assert "'text': 'Digits:'" in received[0] and "'regex': '[0-9]{3}-[0-9]{2}'" in received[0]
    assert f"'text': {out['text']!r}" in finished[0] and "'completion_tokens'" in finished[0]


def test_radixlm_serve_takes_an_sglang_launch_line(tiny_llama_dir):
    flags = [
        *("--model-path", tiny_llama_dir, "--served-model-name", "tiny", "--tp-size", "1", "--dp-size", "1"),
        *("--max-total-tokens", "2048", "--context-length", "512", "--schedule-policy", "fcfs"),
        *("--attention-backend", "torch_native", "--disable-cuda-graph", "--enable-metrics"),
        *("--max-running-requests", "4", "--skip-server-warmup", "--log-level", "info"),
    ]
    with _launch(["-m", "radixlm.cli", "serve"], flags) as server:
        messages = [{"role": "user", "content": "Hi"}]
        out = requests.post(
            server.url + "/v1/chat/completions",
            json={"model": "tiny", "messages": messages, "max_tokens": 4, "temperature": 0},
            timeout=120,
        ).json()
        assert out["model"] == "tiny" and out["choices"][0]["message"]["role"] == "assistant", out
        metrics = requests.get(server.url + "/metrics", timeout=30)
        assert metrics.status_code == 200 and "# TYPE" in metrics.text
        info = requests.get(server.url + "/get_server_info", timeout=30).json()
        assert (info["schedule_policy"], info["attention_backend"], info["max_running_requests"]) == (
            "fcfs",
            "torch",
            4,
        )
        assert "warning: --skip-server-warmup is ignored" in server.log()
