"""``encoder_fp16_weights``: an encoder's weights rounded to fp16, its products of few rows reading an
fp16 copy (``runtime/layers/half_weights.py``; the fp16 paths of ``cpu/small_batch_linear.cpp`` and
``cpu/panel_linear.cpp``)."""

from __future__ import annotations

import pytest
import torch

from radixlm.runtime.engine.engine import Engine
from radixlm.runtime.layers.half_weights import add_half_weights
from radixlm.runtime.layers.linear import Linear
from tests.helpers.built_kernels import decode_kernels, needs_cpu_kernels
from tests.helpers.embedding_models import save_st_encoder, tiny_bert_config
from tests.helpers.float_products import assert_matches_float64, random_product
from tests.helpers.sentence_transformers_ref import sentence_transformers

pytestmark = needs_cpu_kernels
TEXTS = ["the cat sat on the mat", "a dog runs fast", "blue", "the big red house by the sea " * 4]


@pytest.mark.parametrize("rows", [1, 3, 4, 13, 32])
@pytest.mark.parametrize("n,k", [(5, 3), (130, 1536), (963, 129)])
def test_fp16_weight_product_matches_float64_of_the_rounded_weight(rows: int, n: int, k: int) -> None:
    x, w, b = random_product(rows, n, k, True)
    half = w.half()
    assert_matches_float64(decode_kernels.small_batch_linear(x, half, b), x, half.float(), b)


def test_a_linear_with_an_fp16_copy_reads_it_for_few_rows_and_its_packed_copy_beyond() -> None:
    layer = Linear(64, 48, bias=True)
    torch.nn.init.normal_(layer.weight)
    torch.nn.init.normal_(layer.bias)
    original = layer.weight.detach().clone()
    assert add_half_weights(layer) == 64 * 48 * 2
    assert torch.equal(layer.weight.detach(), original.half().float())  # rounded in place
    assert layer.weight_fp16 is not None and layer.weight_fp16.dtype == torch.float16
    for rows in (1, 7, 40):  # 40 rows: beyond HALF_MAX_ROWS, the fp32 weight (same values)
        x = torch.randn(rows, 64)
        with torch.inference_mode():
            out = layer(x)
        ref = x.double() @ layer.weight.detach().double().T + layer.bias.detach().double()
        torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-4)


def test_encoder_fp16_weights_match_sentence_transformers(tmp_path) -> None:
    torch.set_num_threads(1)
    path = save_st_encoder(tiny_bert_config(), tmp_path, "mean", True)
    ref = (
        sentence_transformers()
        .SentenceTransformer(str(path), device="cpu")
        .encode(TEXTS, convert_to_tensor=True)
    )
    common = dict(model=str(path), device="cpu", dtype="float32", num_threads=1, is_embedding=True)
    with Engine(**common, encoder_fp16_weights=True) as engine:
        batch = torch.tensor(engine.encode(TEXTS))
        alone = torch.tensor([engine.encode(t) for t in TEXTS])
        assert engine.update_weights_from_disk(str(path))[0]  # a new model: rounded and copied again
        layers = [m for m in engine.scheduler.runner.model.modules() if isinstance(m, Linear)]
        assert torch.tensor(engine.encode(TEXTS)).allclose(batch, atol=1e-6)
    assert layers and all(m.weight_fp16 is not None for m in layers)
    # the panels (a batch-1 forward's products) are made from the fp16 copy, renewed by the update
    assert all(m.panels is not None and m.panels.dtype == torch.float16 for m in layers)
    for ours in (batch, alone):
        cos = torch.nn.functional.cosine_similarity(ours, ref.float(), dim=-1)
        assert (cos >= 0.9999).all(), cos
