"""SGLang's native response fields, field by field, on a live tiny-model server: logprob entries with
``max_new_tokens=0`` and with ``logprob_start_len`` omitted (checked against transformers on the same
weights), ``model_path``/``tokenizer_path``; and the small things: streamed tool calls without empty
deltas, one log line for a client that leaves, one error line for an unavailable hub id."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import pytest
import torch

from radixlm.runtime.server.launch import launch_server
from tests.helpers.waiting import wait_until

TOP = 5
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"enum": ["Paris", "Rome"]}},
            "required": ["city"],
        },
    },
}


@pytest.fixture(scope="module")
def server(tiny_llama_dir):
    with launch_server(
        model=tiny_llama_dir,
        device="cpu",
        num_threads=1,
        kv_cache_gb=0.05,
        context_length=1024,  # a tool call's prompt (the tools' schemas) is some 540 tokens
        log_level="info",
    ) as handle:
        yield handle


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.url, timeout=120) as c:
        yield c


@pytest.fixture(scope="module")
def reference(tiny_llama_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(tiny_llama_dir)


def _next_token_logprobs(reference, ids: list[int]) -> torch.Tensor:
    model, _ = reference
    with torch.no_grad():
        return torch.log_softmax(model(torch.tensor([ids])).logits[0, -1].float(), dim=-1)


def _generate(client: httpx.Client, **body) -> dict:
    r = client.post("/generate", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_prefill_only_answers_the_next_token_top_logprobs(client, reference):
    """SGLang's chain-of-thought decoding example reads ``output_top_logprobs[0]`` of a
    ``max_new_tokens=0`` request: the distribution of the token after the prompt."""
    _, tokenizer = reference
    prompt = "The capital of France is"
    out = _generate(
        client,
        text=prompt,
        sampling_params={"max_new_tokens": 0},
        return_logprob=True,
        top_logprobs_num=TOP,
        return_text_in_logprobs=True,
    )
    meta = out["meta_info"]
    assert out["text"] == "" and out["output_ids"] == [] and meta["completion_tokens"] == 0
    ids = tokenizer.encode(prompt)
    assert meta["prompt_tokens"] == len(ids)
    expected = _next_token_logprobs(reference, ids)
    vals, top_ids = torch.topk(expected, TOP)
    (top,) = meta["output_top_logprobs"]
    assert [e[1] for e in top] == top_ids.tolist()
    assert [e[0] for e in top] == pytest.approx(vals.tolist(), abs=1e-4)
    assert [e[2] for e in top] == [tokenizer.decode([t]) for t in top_ids.tolist()]
    # the one output entry is the most likely next token, as [logprob, token_id, text]
    assert meta["output_token_logprobs"] == [top[0]]
    # logprob_start_len omitted: SGLang's default, the last prompt token, whose entry has no logprob
    assert meta["input_token_logprobs"] == [[None, ids[-1], tokenizer.decode([ids[-1]])]]
    assert meta["input_top_logprobs"] == [None]


def test_openai_completions_keep_logprobs_to_the_tokens_of_the_text(client):
    """SGLang's next-token entry of a max_tokens=0 request is no token of an OpenAI completion."""
    body = {"model": "m", "prompt": "abc", "max_tokens": 0, "logprobs": 2}
    r = client.post("/v1/completions", json=body)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["text"] == "" and choice["logprobs"]["tokens"] == []


def test_default_logprob_start_gives_one_input_entry_and_every_output_entry(client, reference):
    """What SGLang's client sends for ``unconditional_likelihood_normalized``: ``input_ids``, no
    ``logprob_start_len``, no text in logprobs."""
    _, tokenizer = reference
    ids = tokenizer.encode("one two three")
    out = _generate(
        client,
        input_ids=[ids, ids[1:]],
        sampling_params={"max_new_tokens": 3, "temperature": 0},
        return_logprob=True,
    )
    for prompt, result in zip([ids, ids[1:]], out):
        meta = result["meta_info"]
        assert meta["input_token_logprobs"] == [[None, prompt[-1], None]]
        entries = meta["output_token_logprobs"]
        assert [e[1] for e in entries] == result["output_ids"] and all(e[2] is None for e in entries)
        context = list(prompt)
        for lp, token, _ in entries:
            assert lp == pytest.approx(float(_next_token_logprobs(reference, context)[token]), abs=1e-4)
            context.append(token)


def test_model_and_tokenizer_paths_are_the_names_given(client, tiny_llama_dir):
    info = client.get("/get_model_info").json()
    assert info["model_path"] == tiny_llama_dir and info["tokenizer_path"] == tiny_llama_dir
    server_info = client.get("/get_server_info").json()
    assert server_info["model_path"] == tiny_llama_dir and server_info["tokenizer_path"] == tiny_llama_dir


def test_streamed_tool_calls_send_no_empty_deltas(client):
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [WEATHER],
        "tool_choice": "required",
        "max_tokens": 100,
        "temperature": 0,
    }
    whole = client.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]["tool_calls"]
    with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[0]["role"] == "assistant"
    assert all(d for d in deltas[1:-1]), deltas  # only the final chunk may carry nothing new
    calls: list[dict] = []
    for d in deltas:
        for part in d.get("tool_calls") or []:
            if part.get("id"):
                calls.append({"name": part["function"]["name"], "arguments": ""})
            calls[part["index"]]["arguments"] += part["function"].get("arguments", "")
    assert calls == [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]} for c in whole]


def test_a_client_that_leaves_is_one_info_line(client, server):
    # NOTE: the server looks for a departed client every 0.5 s; 16 x 1000 tokens take some 3 s on the
    # tiny model (480 tokens once took 0.4 s: finished before anyone looked, so nothing was logged)
    body = {"model": "m", "prompt": "tell", "max_tokens": 1000, "n": 16, "ignore_eos": True, "temperature": 0}
    before = server.log()
    with pytest.raises(httpx.TimeoutException):
        httpx.post(server.url + "/v1/completions", json=body, timeout=0.2)

    def logged() -> bool:
        return "client closed the connection" in server.log()[len(before) :]

    wait_until(logged, 30, "the disconnect to be logged", interval=0.2)
    assert client.get("/health").status_code == 200
    new = server.log()[len(before) :]
    assert new.count("client closed the connection to /v1/completions") == 1, new
    assert "Traceback" not in new and "ERROR" not in new, new


def test_an_unavailable_hub_id_is_one_line(tmp_path):
    env = {
        **os.environ,
        "HF_HUB_CACHE": str(tmp_path),
        "HF_ENDPOINT": "http://127.0.0.1:9",  # nothing listens there: refused at once
        "HF_HUB_OFFLINE": "0",
    }
    run = subprocess.run(
        [sys.executable, "-m", "radixlm.launch_server", "--model-path", "no-such-org/no-such-model"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert run.returncode != 0
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert "no-such-org/no-such-model" in lines[0] and "huggingface-cli download" in lines[0]
