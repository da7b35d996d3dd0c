"""Encoders (BERT, XLM-R), cross-encoders and sequence classifiers against sentence-transformers and
transformers on the same tiny random weights."""

from __future__ import annotations

import pytest
import torch

from radixlm.runtime.engine.engine import Engine
from tests.helpers.embedding_models import (
    save_decoder_classifier,
    save_encoder_classifier,
    save_st_encoder,
    tiny_bert_config,
)
from tests.helpers.model_helpers import tiny_llama_config, tiny_qwen3_config
from tests.helpers.sentence_transformers_ref import sentence_transformers

TEXTS = ["the cat sat on the mat", "a dog runs fast", "blue", "the big red house by the sea " * 4]
DOCS = ["the cat sat", "fish swims in the sea", "a small tree", "red"]


def _engine(path) -> Engine:
    return Engine(model=str(path), device="cpu", dtype="float32", num_threads=1, is_embedding=True)


@pytest.mark.parametrize(("roberta", "pooling", "normalize"), [(False, "mean", True), (True, "cls", False)])
def test_encoder_embeddings_match_sentence_transformers(tmp_path, roberta, pooling, normalize):
    torch.set_num_threads(1)
    path = save_st_encoder(tiny_bert_config(roberta), tmp_path, pooling, normalize)
    st = sentence_transformers()
    ref = st.SentenceTransformer(str(path), device="cpu").encode(TEXTS, convert_to_tensor=True).float()
    with _engine(path) as engine:
        ours = torch.tensor(engine.encode(TEXTS))
    cos = torch.nn.functional.cosine_similarity(ours, ref, dim=-1)
    assert (cos >= 0.9999).all(), cos
    torch.testing.assert_close(ours, ref, rtol=1e-3, atol=1e-4)


def test_cross_encoder_rerank_matches_sentence_transformers(tmp_path):
    torch.set_num_threads(1)
    path = save_encoder_classifier(tiny_bert_config(), tmp_path, num_labels=1)
    st = sentence_transformers()
    query = "the cat"
    ref = st.CrossEncoder(str(path), device="cpu").predict([(query, d) for d in DOCS])
    with _engine(path) as engine:
        ours = engine.rerank(query, DOCS)
        with pytest.raises(ValueError, match="documents"):
            engine.rerank(query, [])
        with pytest.raises(ValueError, match="instruction"):  # decoder rerankers only
            engine.rerank(query, DOCS, instruction="find the cat")
    torch.testing.assert_close(
        torch.tensor(ours), torch.as_tensor(ref).float().flatten(), rtol=1e-4, atol=1e-5
    )


@pytest.mark.parametrize("kind", ["xlmr", "llama", "qwen3"])
def test_classifier_logits_match_transformers(tmp_path, kind):
    torch.set_num_threads(1)
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    if kind == "xlmr":
        path = save_encoder_classifier(tiny_bert_config(roberta=True), tmp_path, num_labels=3)
    else:
        config = tiny_llama_config() if kind == "llama" else tiny_qwen3_config()
        path = save_decoder_classifier(config, tmp_path, num_labels=3)
    tok = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForSequenceClassification.from_pretrained(str(path), dtype=torch.float32).eval()
    with torch.no_grad():
        ref = torch.cat([model(**tok(t, return_tensors="pt")).logits for t in TEXTS])
    with _engine(path) as engine:
        ours = torch.tensor(engine.classify(TEXTS))
    torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-4)


def test_encoder_needs_is_embedding(tmp_path):
    path = save_encoder_classifier(tiny_bert_config(), tmp_path)
    with pytest.raises(ValueError, match="is-embedding"):
        Engine(model=str(path), device="cpu", dtype="float32", num_threads=1)
