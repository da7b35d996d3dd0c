"""Decoder embedding models (Llama family, pooled) against sentence-transformers on the same weights."""

from __future__ import annotations

import pytest
import torch

from radixlm.runtime.engine.engine import Engine
from tests.helpers.embedding_models import save_st_decoder
from tests.helpers.model_helpers import tiny_llama_config, tiny_qwen3_config

TEXTS = ["hello world", "the cat sat on the mat", "a", "embeddings are vectors " * 6]


def _engine(path) -> Engine:
    return Engine(
        model=str(path),
        device="cpu",
        dtype="float32",
        num_threads=1,
        max_total_tokens=2048,
        max_running_requests=4,
        context_length=256,
        is_embedding=True,
    )


def _cosines(ours: list[list[float]], ref) -> torch.Tensor:
    return torch.nn.functional.cosine_similarity(torch.tensor(ours), torch.as_tensor(ref).float(), dim=-1)


@pytest.mark.parametrize(
    ("family", "pooling", "normalize"), [("qwen3", "lasttoken", True), ("llama", "mean", False)]
)
def test_matches_sentence_transformers(tmp_path, family, pooling, normalize):
    torch.set_num_threads(1)
    config = tiny_qwen3_config() if family == "qwen3" else tiny_llama_config()
    path = save_st_decoder(config, tmp_path, pooling, normalize)
    from sentence_transformers import SentenceTransformer

    ref = SentenceTransformer(str(path), device="cpu").encode(TEXTS, convert_to_tensor=True)
    with _engine(path) as engine:
        ours = engine.encode(TEXTS)
        assert (_cosines(ours, ref) >= 0.9999).all()
        if not normalize:  # the magnitudes too
            torch.testing.assert_close(torch.tensor(ours), ref.float(), rtol=1e-3, atol=1e-4)
        single = engine.encode(TEXTS[1])
        assert _cosines([single], ref[1:2]).item() >= 0.9999
        engine.check_kv_integrity()
        cache = engine.scheduler.cache  # idle: the KV went into the tree, unlocked (evictable)
        assert cache.tree.protected_size() == 0
        assert cache.allocator.available_size() + cache.tree.evictable_size() == cache.capacity
        assert engine.flush_cache()
        assert cache.allocator.available_size() == cache.capacity


def test_bad_input_and_generation_are_refused(tmp_path):
    path = save_st_decoder(tiny_qwen3_config(), tmp_path, "lasttoken", True)
    with _engine(path) as engine:
        with pytest.raises(ValueError, match="prompt"):
            engine.encode([])
        with pytest.raises(ValueError, match=r"prompt\[1\]"):
            engine.encode(["ok", 3.5])
        with pytest.raises(ValueError, match="vocabulary"):
            engine.encode([10**6])
        with pytest.raises(ValueError, match="dimensions"):
            engine.encode("hi", dimensions=8)  # not a Matryoshka model
        with pytest.raises(ValueError, match="embeddings"):
            engine.generate("hello", {"max_new_tokens": 2})
