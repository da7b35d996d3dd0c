"""Fill-in-the-middle: ``suffix`` on ``/v1/completions`` and ``/infill`` against transformers' greedy
continuation of the same prefix-suffix-middle prompt, and the 400 of a model without FIM tokens."""

from __future__ import annotations

import shutil

import httpx
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from radixlm.runtime.server.errors import ApiError
from radixlm.runtime.server.fim import fim_input_ids, find_fim_tokens
from radixlm.runtime.server.launch import launch_server

FIM = ["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"]


@pytest.fixture(scope="module")
def fim_model_dir(tiny_llama_dir, tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("tiny-fim")
    shutil.copytree(tiny_llama_dir, path, dirs_exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    tokenizer.add_tokens(FIM, special_tokens=True)
    tokenizer.save_pretrained(str(path))
    return str(path)


def _serve(model: str, name: str):
    return launch_server(
        model=model, device="cpu", num_threads=1, kv_cache_gb=0.02, context_length=512, served_model_name=name
    )


def test_markers_found_in_order(fim_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(fim_model_dir)
    tokens = find_fim_tokens(tokenizer)
    assert tokens is not None
    ids = fim_input_ids(tokenizer, "m", "def f(", "):\n", "x")
    pre, suf, mid = (tokenizer.convert_tokens_to_ids(t) for t in FIM)
    assert ids[ids.index(pre) :] == [
        pre,
        *tokenizer.encode("def f(", add_special_tokens=False),
        suf,
        *tokenizer.encode("):\n", add_special_tokens=False),
        mid,
        *tokenizer.encode("x", add_special_tokens=False),
    ]


def test_smollm2_has_no_fim_tokens(smollm2_tokenizer):
    # SmolLM2's vocabulary keeps StarCoder's <file_sep>/<repo_name> but not its FIM markers.
    assert find_fim_tokens(smollm2_tokenizer) is None
    with pytest.raises(
        ApiError, match=r"'smollm2-135m' does not support fill-in-the-middle.*<\|fim_prefix\|>"
    ):
        fim_input_ids(smollm2_tokenizer, "smollm2-135m", "a", "b")


def test_suffix_completion_is_transformers_greedy_fim(fim_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(fim_model_dir)
    ids = fim_input_ids(tokenizer, "fim", "def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n")
    model = AutoModelForCausalLM.from_pretrained(fim_model_dir, dtype=torch.float32)
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False, eos_token_id=None)
    expected_ids = out[0, len(ids) :].tolist()
    with _serve(fim_model_dir, "fim") as handle:
        body = {
            "prompt": "def add(a, b):\n    return ",
            "suffix": "\n\nprint(add(1, 2))\n",
            "max_tokens": 8,
            "temperature": 0,
            "ignore_eos": True,
        }
        r = httpx.post(handle.url + "/v1/completions", json=body, timeout=60)
        assert r.status_code == 200, r.text
        usage = r.json()["usage"]
        assert usage["prompt_tokens"] == len(ids)
        text = r.json()["choices"][0]["text"]
        assert text == tokenizer.decode(expected_ids, skip_special_tokens=True)
        infill = {
            "input_prefix": "def add(a, b):\n    return ",
            "input_suffix": "\n\nprint(add(1, 2))\n",
            "n_predict": 8,
            "temperature": 0,
            "ignore_eos": True,
        }
        r = httpx.post(handle.url + "/infill", json=infill, timeout=60)
        assert r.status_code == 200, r.text
        assert r.json()["content"] == text and r.json()["tokens_predicted"] == 8


def test_model_without_fim_tokens_is_a_400_naming_it(tiny_llama_dir):
    with _serve(tiny_llama_dir, "tiny-nofim") as handle:
        r = httpx.post(handle.url + "/v1/completions", json={"prompt": "a", "suffix": "b"}, timeout=60)
        assert r.status_code == 400
        message = r.json()["error"]["message"]
        assert "'tiny-nofim'" in message and "<|fim_middle|>" in message
        r = httpx.post(handle.url + "/infill", json={"input_prefix": "a", "input_suffix": "b"}, timeout=60)
        assert r.status_code == 400 and "'tiny-nofim'" in r.json()["error"]["message"]
