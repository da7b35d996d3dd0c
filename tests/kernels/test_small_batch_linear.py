"""The fp32 small-batch product (``radixlm/kernels/cpu/small_batch_linear.cpp``) against a float64
reference on random shapes (ragged K and N, 1 to 40 rows, with and without bias); a row's bits do
not depend on the other rows or the threads; ``Linear`` takes it for a few rows and leaves a rebound
``F.linear`` (deterministic inference) in charge; bad arguments are refused by name."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from radixlm.kernels import linear as linear_module
from radixlm.kernels.cpu.build import load_decode_kernels
from radixlm.kernels.linear import HEAD_MAX_ROWS, SMALL_BATCH_MAX_ROWS
from radixlm.runtime.executor.deterministic import batch_invariant_linear, padded_linear
from radixlm.runtime.layers.linear import Embedding, Linear
from tests.helpers.built_kernels import decode_kernels, needs_cpu_kernels
from tests.helpers.float_products import assert_matches_float64, random_product

kernels = decode_kernels
pytestmark = needs_cpu_kernels


@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 7, 16, 40])
@pytest.mark.parametrize("n,k", [(1, 8), (5, 3), (576, 576), (963, 129), (4099, 37), (130, 1536)])
@pytest.mark.parametrize("bias", [False, True])
def test_small_batch_linear_matches_float64_reference(rows: int, n: int, k: int, bias: bool) -> None:
    x, w, b = random_product(rows, n, k, bias)
    assert_matches_float64(kernels.small_batch_linear(x, w, b), x, w, b)


def test_small_batch_linear_rows_do_not_depend_on_batch_or_threads() -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(40, 333, generator=g)
    w = torch.randn(1027, 333, generator=g)
    alone = torch.cat([kernels.small_batch_linear(x[i : i + 1], w, threads=1) for i in range(40)])
    for rows in (2, 3, 4, 5, 9, 16, 40):
        for threads in (1, 2, 3):
            assert torch.equal(kernels.small_batch_linear(x[:rows], w, threads=threads), alone[:rows])
    # a row's position in the batch changes nothing either
    assert torch.equal(kernels.small_batch_linear(x.flip(0), w), alone.flip(0))


def test_small_batch_linear_empty_shapes() -> None:
    assert kernels.small_batch_linear(torch.randn(0, 16), torch.randn(8, 16)).shape == (0, 8)
    assert kernels.small_batch_linear(torch.randn(2, 16), torch.randn(0, 16)).shape == (2, 0)
    out = kernels.small_batch_linear(torch.randn(3, 0), torch.randn(4, 0), torch.arange(4.0))
    assert torch.equal(out, torch.arange(4.0).expand(3, 4))


def test_small_batch_linear_refuses_bad_arguments() -> None:
    x, w = torch.randn(2, 16), torch.randn(8, 16)
    with pytest.raises(ValueError, match="x must be"):
        kernels.small_batch_linear(x.double(), w)
    with pytest.raises(ValueError, match="weight must be"):
        kernels.small_batch_linear(x, torch.randn(16, 8).T)
    with pytest.raises(ValueError, match="in_features differ"):
        kernels.small_batch_linear(x, torch.randn(8, 15))
    with pytest.raises(ValueError, match="bias must be"):
        kernels.small_batch_linear(x, w, torch.randn(7))
    with pytest.raises(ValueError, match="threads"):
        kernels.small_batch_linear(x, w, threads=0)


def test_linear_layers_take_the_kernel_for_a_few_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    layer = Linear.from_weight(torch.randn(300, 64))
    embed = Embedding(500, 64)
    embed.weight.data.normal_()
    calls = []
    loaded = load_decode_kernels()  # the object the layers call, not this module's stand-in
    real = loaded.small_batch_linear
    monkeypatch.setattr(
        loaded, "small_batch_linear", lambda *a, **kw: calls.append(a[0].shape) or real(*a, **kw)
    )
    x = torch.randn(2, 3, 64)  # six rows, any leading shape
    with torch.inference_mode():  # as the engine runs its forward passes
        out = layer(x)
        assert out.shape == (2, 3, 300) and calls == [(6, 64)]
        torch.testing.assert_close(out, F.linear(x, layer.weight), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(embed.project(x[0]), F.linear(x[0], embed.weight), atol=1e-5, rtol=1e-5)
        assert len(calls) == 2
        layer(torch.randn(SMALL_BATCH_MAX_ROWS + 1, 64))  # more rows: torch's GEMM
        assert len(calls) == 2
        embed.project(torch.randn(HEAD_MAX_ROWS, 64))  # an LM head takes it for more rows
        assert len(calls) == 3
        layer.project(torch.randn(HEAD_MAX_ROWS + 1, 64))
        assert len(calls) == 3


def test_products_autograd_tracks_stay_differentiable() -> None:
    layer = Linear.from_weight(torch.randn(30, 16))
    layer.weight.requires_grad_()
    x = torch.randn(2, 16, requires_grad=True)
    layer(x).sum().backward()
    torch.testing.assert_close(x.grad, layer.weight.detach().sum(0).expand(2, 16))
    torch.testing.assert_close(layer.weight.grad, x.detach().sum(0).expand(30, 16))


def test_rebound_f_linear_wins_over_the_kernel() -> None:
    """Deterministic inference routes F.linear to its padded products: the layers must use them."""
    layer = Linear.from_weight(torch.randn(300, 64))
    x = torch.randn(1, 64)
    with batch_invariant_linear(padded_linear):
        out = linear_module.linear(x, layer.weight)
    assert torch.equal(out, padded_linear(x, layer.weight))
