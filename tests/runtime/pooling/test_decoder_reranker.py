"""Decoder rerankers (Qwen3-Reranker: a causal LM's "yes"/"no" logits at the last position) against
transformers' causal LM on the same tiny random weights and the model card's prompt."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import torch

from radixlm.runtime.engine.engine import Engine
from radixlm.runtime.server.launch import launch_server
from tests.helpers.model_helpers import save_tiny_model, tiny_qwen3_config

QUERY = "where does the cat sit?"
DOCS = ["the cat sat on the mat", "fish swims in the sea", "no", "yes yes, the cat sat there " * 3]
# Qwen3-Reranker's model card, written out here independently of radixlm/runtime/pooling/rerank_prompt.py.
PREFIX = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the "
    'Instruct provided. Note that the answer can only be "yes" or "no".<|im_end|>\n<|im_start|>user\n'
)
SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
CARD_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
OVERRIDES = {  # vLLM's hf_overrides for Qwen3-Reranker, written into config.json
    "architectures": ["Qwen3ForSequenceClassification"],
    "classifier_from_token": ["no", "yes"],
    "is_original_qwen3_reranker": True,
}


def _save_causal_lm(path: Path, tied: bool, answer_tokens: bool = True, seed: int = 3) -> Path:
    """A tiny Qwen3ForCausalLM whose tokenizer has "yes" and "no" as single tokens (or lacks them)."""
    from transformers import AutoTokenizer

    save_tiny_model(tiny_qwen3_config(tie_word_embeddings=tied), path, seed=seed)
    if answer_tokens:
        tok = AutoTokenizer.from_pretrained(str(path))
        tok.add_tokens(["yes", "no"])
        tok.save_pretrained(str(path))
    return path


def _as_reranker(path: Path, **overrides) -> None:
    config_file = path / "config.json"
    config = json.loads(config_file.read_text())
    config.update({**OVERRIDES, **overrides})
    config_file.write_text(json.dumps(config))


def _reference(path: Path, instruction: str) -> list[float]:
    """softmax([logit_no, logit_yes])[1] at the last position of transformers' causal LM."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path))
    no, yes = tok.convert_tokens_to_ids("no"), tok.convert_tokens_to_ids("yes")
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    scores = []
    for doc in DOCS:
        body = f"<Instruct>: {instruction}\n<Query>: {QUERY}\n<Document>: {doc}"
        ids = [i for part in (PREFIX, body, SUFFIX) for i in tok(part, add_special_tokens=False)["input_ids"]]
        with torch.no_grad():
            last = model(torch.tensor([ids])).logits[0, -1]
        scores.append(torch.softmax(last[[no, yes]].double(), -1)[1].item())
    return scores


def _engine(path: Path) -> Engine:
    return Engine(model=str(path), device="cpu", dtype="float32", num_threads=1, is_embedding=True)


@pytest.mark.parametrize("tied", [True, False])
def test_scores_match_transformers_yes_no_logits(tmp_path, tied):
    torch.set_num_threads(1)
    path = _save_causal_lm(tmp_path, tied)
    ref = _reference(path, CARD_INSTRUCTION)
    ref_task = _reference(path, "Find the animal")
    _as_reranker(path)
    with _engine(path) as engine:
        assert engine.model_info()["rerank_format"] == "qwen3_yes_no"
        ours = engine.rerank(QUERY, DOCS)
        ours_task = engine.rerank(QUERY, DOCS, instruction="Find the animal")
        cache = engine.scheduler.cache  # the KV went into the tree, unlocked (evictable)
        assert cache.tree.protected_size() == 0
        assert cache.allocator.available_size() + cache.tree.evictable_size() == cache.capacity
        with pytest.raises(ValueError, match="instruction"):
            engine.rerank(QUERY, DOCS, instruction=3)  # type: ignore[arg-type]
    torch.testing.assert_close(torch.tensor(ours), torch.tensor(ref), rtol=0, atol=1e-5)
    torch.testing.assert_close(torch.tensor(ours_task), torch.tensor(ref_task), rtol=0, atol=1e-5)
    assert ours != ours_task  # the instruction reaches the prompt
    assert sorted(range(len(DOCS)), key=lambda i: -ours[i]) == sorted(range(len(DOCS)), key=lambda i: -ref[i])


def test_http_rerank_orders_documents(tmp_path):
    """The Qwen3ForCausalLM checkpoint unchanged, served as a reranker by --json-model-override-args."""
    path = _save_causal_lm(tmp_path, tied=True)
    ref = _reference(path, "Find the animal")
    server = dict(device="cpu", num_threads=1, kv_cache_gb=0.02, context_length=512, is_embedding=True)
    server["json_model_override_args"] = json.dumps(OVERRIDES)  # SGLang's flag: config.json stays as is
    body = {"query": QUERY, "documents": DOCS, "instruction": "Find the animal", "top_n": 3}
    with launch_server(model=str(path), **server) as handle:
        r = httpx.post(handle.url + "/v1/rerank", json=body, timeout=120)
        bad = httpx.post(handle.url + "/v1/rerank", json={**body, "documents": []}, timeout=60)
    assert r.status_code == 200, r.text
    results = r.json()
    best = sorted(range(len(DOCS)), key=lambda i: -ref[i])[:3]
    assert [x["index"] for x in results] == best
    assert [x["document"] for x in results] == [DOCS[i] for i in best]
    for x in results:
        assert abs(x["score"] - ref[x["index"]]) < 1e-5
    assert bad.status_code == 400 and "documents" in bad.text


def test_weight_update_rebinds_the_answer_rows(tmp_path):
    """Checkpoints left as published, the override given once: an update serves the new LM head's rows."""
    first = _save_causal_lm(tmp_path / "a", tied=False)
    second = _save_causal_lm(tmp_path / "b", tied=False, seed=4)
    ref = _reference(second, CARD_INSTRUCTION)
    overrides = json.dumps(OVERRIDES)
    kwargs = dict(device="cpu", dtype="float32", num_threads=1, is_embedding=True)
    with Engine(model=str(first), json_model_override_args=overrides, **kwargs) as engine:
        before = engine.rerank(QUERY, DOCS)
        ok, message = engine.update_weights_from_disk(str(second))
        assert ok, message
        after = engine.rerank(QUERY, DOCS)
    assert before != after
    torch.testing.assert_close(torch.tensor(after), torch.tensor(ref), rtol=0, atol=1e-5)


def test_missing_answer_tokens_or_other_forms_fail_at_load(tmp_path):
    path = _save_causal_lm(tmp_path / "plain", tied=True, answer_tokens=False)  # byte tokens only
    _as_reranker(path)
    with pytest.raises(ValueError, match=r"classifier_from_token: 'no', 'yes' is not a single token"):
        _engine(path)
    other = _save_causal_lm(tmp_path / "other", tied=True)
    _as_reranker(other, classifier_from_token=["yes"], is_original_qwen3_reranker=False)
    with pytest.raises(ValueError, match="only Qwen3-Reranker's form"):
        _engine(other)
    with pytest.raises(ValueError, match="JSON object"):
        Engine(model=str(other), device="cpu", json_model_override_args='["no", "yes"]')
