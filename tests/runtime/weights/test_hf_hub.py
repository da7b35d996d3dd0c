"""Hugging Face hub ids resolve through the user's HF cache (a fake cache layout built here) and say
why when they cannot: offline requested, or the hub unreachable."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from radixlm.runtime.weights.hf_hub import looks_like_hub_id
from radixlm.runtime.weights.model_registry import resolve_model

REVISION = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture()
def hf_cache(tmp_path, tiny_llama_dir, monkeypatch) -> Path:
    """``$HF_HUB_CACHE/models--test-org--tiny-llama/{refs/main, snapshots/<rev>/...}``."""
    cache = tmp_path / "hub"
    repo = cache / "models--test-org--tiny-llama"
    shutil.copytree(tiny_llama_dir, repo / "snapshots" / REVISION)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(REVISION)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    return cache


def test_hub_id_resolves_to_the_cached_snapshot(hf_cache):
    path = Path(resolve_model("test-org/tiny-llama"))
    assert path == hf_cache / "models--test-org--tiny-llama" / "snapshots" / REVISION
    assert (path / "config.json").is_file()
    assert Path(resolve_model(f"test-org/tiny-llama@{REVISION}")) == path


def test_cached_model_resolves_offline(hf_cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert Path(resolve_model("test-org/tiny-llama")).name == REVISION


def test_missing_model_offline_names_hf_hub_offline(hf_cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match=r"not in the Hugging Face cache.*HF_HUB_OFFLINE is set"):
        resolve_model("test-org/not-cached")


def test_missing_model_unreachable_hub_says_so(hf_cache, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there: refused at once
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    with pytest.raises(ValueError, match=r"not in the Hugging Face cache.*could not be downloaded from") as e:
        resolve_model("test-org/not-cached")
    assert "\n" not in str(e.value) and "huggingface-cli download test-org/not-cached" in str(e.value)


def test_local_paths_and_names_are_not_hub_ids(tmp_path, tiny_llama_dir):
    assert looks_like_hub_id("HuggingFaceTB/SmolLM2-360M-Instruct")
    assert not looks_like_hub_id("smollm2-135m")
    assert not looks_like_hub_id(tiny_llama_dir)
    assert not looks_like_hub_id("a/b/c")


def test_engine_takes_model_path_hub_id(hf_cache, monkeypatch):
    from tests.helpers.engines import make_engine

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    engine = make_engine(model=None, model_path="test-org/tiny-llama", device="cpu", num_threads=1)
    try:
        info = engine.model_info()
        assert info["model_path"] == "test-org/tiny-llama" and info["local_model_path"].endswith(REVISION)
        out = engine.generate("Hi", {"max_new_tokens": 3, "temperature": 0})
        assert out["meta_info"]["completion_tokens"] == 3
    finally:
        engine.shutdown()
