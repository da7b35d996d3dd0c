"""The embedding server's HTTP routes against sentence-transformers and transformers, and the 400s
that keep embedding and generating servers apart."""

from __future__ import annotations

import base64
import json

import httpx
import numpy as np
import pytest
import torch

from radixlm.runtime.server.launch import launch_server
from tests.helpers.embedding_models import save_encoder_classifier, save_st_decoder, tiny_bert_config
from tests.helpers.model_helpers import tiny_qwen3_config
from tests.helpers.sentence_transformers_ref import sentence_transformers

TEXTS = ["hello world", "the cat sat on the mat", "vectors " * 5]
DOCS = ["the cat sat", "fish swims in the sea", "a small tree"]
SERVER = dict(device="cpu", num_threads=1, kv_cache_gb=0.02, context_length=256, is_embedding=True)


@pytest.fixture(scope="module")
def embedder_dir(tmp_path_factory) -> str:
    path = save_st_decoder(tiny_qwen3_config(), tmp_path_factory.mktemp("emb"), "lasttoken", True)
    config = json.loads((path / "config.json").read_text())
    config["is_matryoshka"] = True  # allow ``dimensions``
    (path / "config.json").write_text(json.dumps(config))
    return str(path)


@pytest.fixture(scope="module")
def embedder(embedder_dir):
    with launch_server(model=embedder_dir, **SERVER) as handle:
        yield handle


@pytest.fixture(scope="module")
def reference(embedder_dir) -> torch.Tensor:
    st = sentence_transformers()
    return st.SentenceTransformer(embedder_dir, device="cpu").encode(TEXTS, convert_to_tensor=True).float()


def _cos(a, b) -> torch.Tensor:
    return torch.nn.functional.cosine_similarity(torch.as_tensor(a).float(), b, dim=-1)


def test_openai_embeddings(embedder, reference):
    r = httpx.post(embedder.url + "/v1/embeddings", json={"input": TEXTS}, timeout=60)
    assert r.status_code == 200, r.text
    body = r.json()
    assert [d["index"] for d in body["data"]] == [0, 1, 2]
    assert (_cos([d["embedding"] for d in body["data"]], reference) >= 0.9999).all()
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] > 0
    b64 = httpx.post(embedder.url + "/v1/embeddings", json={"input": TEXTS[0], "encoding_format": "base64"})
    vector = np.frombuffer(base64.b64decode(b64.json()["data"][0]["embedding"]), dtype="<f4")
    assert _cos([vector.tolist()], reference[:1]).item() >= 0.9999
    short = httpx.post(embedder.url + "/v1/embeddings", json={"input": TEXTS, "dimensions": 16}).json()
    truncated = torch.nn.functional.normalize(reference[:, :16], dim=-1)
    ours = torch.tensor([d["embedding"] for d in short["data"]])
    assert ours.shape == (3, 16) and (_cos(ours, truncated) >= 0.9999).all()
    assert torch.allclose(ours.norm(dim=-1), torch.ones(3), atol=1e-5)


def test_concurrent_requests_get_their_own_answers(embedder, reference):
    """Requests in flight together are batched by the scheduler; each answer reaches its own request,
    a refused one (bad ``dimensions``) among them included."""
    from concurrent.futures import ThreadPoolExecutor

    def post(i: int) -> httpx.Response:
        body = {"input": TEXTS[i % 3], **({"dimensions": 10**6} if i == 4 else {})}
        return httpx.post(embedder.url + "/v1/embeddings", json=body, timeout=60)

    with ThreadPoolExecutor(9) as pool:
        replies = list(pool.map(post, range(9)))
    assert replies[4].status_code == 400 and "dimensions" in replies[4].text
    for i, r in enumerate(replies):
        if i != 4:
            assert r.status_code == 200, r.text
            assert _cos([r.json()["data"][0]["embedding"]], reference[i % 3 : i % 3 + 1]).item() >= 0.9999


def test_native_encode(embedder, reference):
    one = httpx.post(embedder.url + "/encode", json={"text": TEXTS[1]}, timeout=60).json()
    assert _cos([one["embedding"]], reference[1:2]).item() >= 0.9999
    assert one["meta_info"]["prompt_tokens"] > 0
    many = httpx.post(embedder.url + "/encode", json={"text": TEXTS}).json()
    assert (_cos([m["embedding"] for m in many], reference) >= 0.9999).all()
    ids = httpx.post(embedder.url + "/encode", json={"input_ids": [5, 6, 7]}).json()
    assert len(ids["embedding"]) == reference.shape[1]


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/embeddings", {"input": []}, "input"),
        ("/v1/embeddings", {"input": ["ok", ""]}, "input[1]"),
        ("/v1/embeddings", {"input": [1, 10**7]}, "input"),
        ("/v1/embeddings", {"input": "x", "encoding_format": "hex"}, "encoding_format"),
        ("/v1/embeddings", {"input": "x", "dimensions": 4096}, "dimensions"),
        ("/encode", {}, "input_ids"),
        ("/encode", {"text": "a", "input_ids": [1]}, "text"),
    ],
)
def test_bad_input_names_the_field(embedder, path, body, field):
    r = httpx.post(embedder.url + path, json=body, timeout=60)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == field, r.text


def test_generation_refused_on_an_embedding_server(embedder):
    r = httpx.post(embedder.url + "/generate", json={"text": "hi"})
    assert r.status_code == 400 and "--is-embedding" in r.json()["error"]["message"]
    chat = {"messages": [{"role": "user", "content": "x"}]}
    r = httpx.post(embedder.url + "/v1/chat/completions", json=chat)
    assert r.status_code == 400
    paths = httpx.get(embedder.url + "/openapi.json").json()["paths"]
    assert "/v1/embeddings" in paths and "/generate" not in paths


def test_embeddings_refused_on_a_generating_server(tiny_llama_dir):
    with launch_server(model=tiny_llama_dir, device="cpu", num_threads=1, kv_cache_gb=0.02) as server:
        r = httpx.post(server.url + "/v1/embeddings", json={"input": "hi"})
        assert r.status_code == 400 and "--is-embedding" in r.json()["error"]["message"]
        assert "/v1/embeddings" not in httpx.get(server.url + "/openapi.json").json()["paths"]


def test_rerank_and_classify(tmp_path):
    path = save_encoder_classifier(tiny_bert_config(), tmp_path, num_labels=1)
    st = sentence_transformers()
    ref = st.CrossEncoder(str(path), device="cpu").predict([("the cat", d) for d in DOCS])
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForSequenceClassification.from_pretrained(str(path)).eval()
    with torch.no_grad():
        logits = [model(**tok(d, return_tensors="pt")).logits[0].tolist() for d in DOCS]
    with launch_server(model=str(path), **SERVER) as server:
        r = httpx.post(server.url + "/v1/rerank", json={"query": "the cat", "documents": DOCS, "top_n": 2})
        assert r.status_code == 200, r.text
        results = r.json()
        best = sorted(np.asarray(ref).flatten().tolist(), reverse=True)[:2]  # (a random model ties)
        assert [x["score"] for x in results] == pytest.approx(best, abs=1e-5)
        for x in results:
            assert x["score"] == pytest.approx(float(np.asarray(ref).flatten()[x["index"]]), abs=1e-5)
            assert x["document"] == DOCS[x["index"]]
        c = httpx.post(server.url + "/classify", json={"input": DOCS})
        assert c.status_code == 200, c.text
        got = [d["logits"] for d in c.json()["data"]]
        torch.testing.assert_close(torch.tensor(got), torch.tensor(logits), rtol=1e-4, atol=1e-4)
        bad = httpx.post(server.url + "/v1/rerank", json={"query": "q", "documents": "not a list"})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "documents"
