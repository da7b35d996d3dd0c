"""fp32 weights packed for oneDNN (``runtime/layers/packed_weights.py``): the packed product equals a
float64 reference on random shapes; a row's bits do not depend on how many rows share the product;
layers take it beyond a few rows and the small-batch kernel below; the model runner packs every float
layer and the tied LM head unless asked not to (or in deterministic mode), with the same greedy text."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from radixlm.kernels import linear as linear_module
from radixlm.kernels.linear import PACKED_KERNEL_MAX_ROWS, packed_linear
from radixlm.runtime.layers.linear import Embedding, Linear
from radixlm.runtime.layers.packed_weights import pack_model_weights, pack_weight, packing_supported
from tests.helpers.float_products import assert_matches_float64, random_product
from tests.helpers.model_helpers import greedy_generate, make_runner, save_tiny_model, tiny_llama_config

pytestmark = pytest.mark.skipif(
    not packing_supported(torch.device("cpu"), torch.float32), reason="this torch build has no oneDNN"
)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return save_tiny_model(tiny_llama_config(tie_word_embeddings=True), tmp_path_factory.mktemp("tiny"))


@pytest.mark.parametrize("rows", [1, 3, 13, 64, 331])
@pytest.mark.parametrize("n,k", [(1, 8), (5, 3), (576, 576), (963, 129), (4099, 37), (130, 1536)])
@pytest.mark.parametrize("bias", [False, True])
def test_packed_product_matches_float64_reference(rows: int, n: int, k: int, bias: bool) -> None:
    x, w, b = random_product(rows, n, k, bias)
    with torch.inference_mode():
        out = packed_linear(x, pack_weight(w), b, n)
    assert_matches_float64(out, x, w, b)


def test_packed_product_rows_do_not_depend_on_the_row_count() -> None:
    g = torch.Generator().manual_seed(3)
    x = torch.randn(333, 576, generator=g)
    packed = pack_weight(torch.randn(1536, 576, generator=g))
    with torch.inference_mode():
        alone = torch.cat([packed_linear(x[i : i + 1], packed, None, 1536) for i in range(333)])
        for rows in (1, 7, 13, 64, 333):
            assert torch.equal(packed_linear(x[:rows], packed, None, 1536), alone[:rows])


def test_layers_take_the_packed_product_beyond_a_few_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    layer = Linear.from_weight(torch.randn(300, 64))
    layer.bias = torch.nn.Parameter(torch.randn(300), requires_grad=False)
    head = Embedding(500, 64)
    head.weight.data.normal_()
    pack_model_weights(torch.nn.ModuleDict({"layer": layer, "lm_head": head}))
    assert layer.packed is not None and head.packed is not None
    calls: list[tuple[int, ...]] = []
    monkeypatch.setattr(
        linear_module, "packed_linear", lambda x, *a: calls.append(tuple(x.shape)) or packed_linear(x, *a)
    )
    with torch.inference_mode():
        x = torch.randn(PACKED_KERNEL_MAX_ROWS, 64)
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(head.project(x), F.linear(x, head.weight), atol=1e-5, rtol=1e-5)
        assert calls == []  # a few rows: the small-batch kernel
        x = torch.randn(2, PACKED_KERNEL_MAX_ROWS, 64)  # any leading shape
        out = layer(x)
        assert out.shape == (2, PACKED_KERNEL_MAX_ROWS, 300)
        torch.testing.assert_close(out, F.linear(x, layer.weight, layer.bias), atol=1e-5, rtol=1e-5)
        y = torch.randn(40, 64)
        torch.testing.assert_close(head.project(y), F.linear(y, head.weight), atol=1e-5, rtol=1e-5)
    assert calls == [(2, PACKED_KERNEL_MAX_ROWS, 64), (40, 64)]


def test_runner_packs_float_layers_and_the_tied_head(tiny_dir) -> None:
    runner = make_runner(tiny_dir)
    layers = [m for m in runner.model.modules() if isinstance(m, Linear)]
    assert layers and all(m.packed is not None for m in layers)
    assert runner.model.lm_head is runner.model.model.embed_tokens and runner.model.lm_head.packed is not None
    for overrides in ({"disable_weight_packing": True}, {"enable_deterministic_inference": True}):
        plain = make_runner(tiny_dir, **overrides)
        assert all(m.packed is None for m in plain.model.modules() if isinstance(m, (Linear, Embedding)))


def test_packed_and_plain_runners_agree(tiny_dir) -> None:
    """Greedy text of a batch wide enough for the packed product (prefill and 16-row decodes)."""
    prompts = [[(7 * i + j) % 300 + 3 for j in range(5 + i % 4)] for i in range(16)]
    packed = greedy_generate(make_runner(tiny_dir), prompts, max_new_tokens=8)
    plain = greedy_generate(make_runner(tiny_dir, disable_weight_packing=True), prompts, max_new_tokens=8)
    assert packed == plain
