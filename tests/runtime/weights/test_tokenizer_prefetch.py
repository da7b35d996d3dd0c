"""The tokenizer loaded in a thread while the weights load: the same tokenizer as in line, and the
same errors, raised to the caller of ``load_model``."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest
import torch

from radixlm.runtime.weights import tokenizer_prefetch
from radixlm.runtime.weights.loader import load_model
from radixlm.runtime.weights.tokenizer_files import load_tokenizer, tokenizer_dir
from radixlm.runtime.weights.tokenizer_prefetch import TokenizerPrefetch
from tests.helpers.model_helpers import save_tiny_model, tiny_llama_config

CPU = torch.device("cpu")


@pytest.fixture
def hf_dir(tmp_path) -> Path:
    return save_tiny_model(tiny_llama_config(), tmp_path / "hf")


def test_the_prefetched_tokenizer_is_the_one_loaded_in_line(hf_dir) -> None:
    path, tok = TokenizerPrefetch(str(hf_dir)).result()
    reference = load_tokenizer(tokenizer_dir(str(hf_dir)))
    assert path == tokenizer_dir(str(hf_dir))
    assert type(tok) is type(reference) and tok.encode("Hello world") == reference.encode("Hello world")


def test_load_model_loads_the_tokenizer_in_another_thread(hf_dir, monkeypatch) -> None:
    threads = []

    def recording(path: str):
        threads.append(threading.current_thread())
        return load_tokenizer(path)

    monkeypatch.setattr(tokenizer_prefetch, "load_tokenizer", recording)
    loaded = load_model(str(hf_dir), CPU, torch.float32)
    assert threads and threads[0] is not threading.main_thread()
    assert loaded.tokenizer is not None and loaded.tokenizer_path == tokenizer_dir(str(hf_dir))


def test_an_error_in_the_thread_reaches_the_caller_as_it_was_raised(hf_dir, monkeypatch) -> None:
    def broken(path: str):
        raise ValueError(f"tokenizer at {path} is damaged")

    monkeypatch.setattr(tokenizer_prefetch, "load_tokenizer", broken)
    with pytest.raises(ValueError, match="is damaged"):
        load_model(str(hf_dir), CPU, torch.float32)


def test_a_missing_tokenizer_is_refused_as_before(hf_dir, tmp_path) -> None:
    missing = str(tmp_path / "no-such-tokenizer")
    with pytest.raises(Exception) as in_line:
        tokenizer_dir(missing)
    with pytest.raises(type(in_line.value), match=re.escape(str(in_line.value))):
        load_model(str(hf_dir), CPU, torch.float32, tokenizer=missing)
