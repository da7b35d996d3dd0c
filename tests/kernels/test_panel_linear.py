"""The panel product (``radixlm/kernels/cpu/panel_linear.cpp``, weights in ``pack_panels``'s column
panels) against a float64 reference and torch's ``F.linear`` (n not a multiple of 16, any k, 1 to 64
rows, fp32 and fp16 panels); a row's bits do not depend on the other rows or the threads; a
``Linear`` with panels takes them up to ``PANEL_MAX_ROWS`` rows; bad arguments are refused."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from radixlm.kernels.cpu.decode_ops import DecodeKernels
from radixlm.kernels.linear import PANEL_MAX_ROWS, pack_panels
from radixlm.runtime.layers.linear import Linear
from radixlm.runtime.layers.panel_weights import add_panel_weights
from tests.helpers.built_kernels import decode_kernels, needs_cpu_kernels
from tests.helpers.float_products import assert_matches_float64, random_product

kernels = decode_kernels
pytestmark = needs_cpu_kernels


@pytest.mark.parametrize("rows", [1, 2, 5, 6, 7, 12, 13, 31, 64])
@pytest.mark.parametrize("n,k", [(1, 8), (5, 3), (17, 29), (384, 384), (963, 129), (384, 1536)])
@pytest.mark.parametrize("bias", [False, True])
def test_panel_linear_matches_float64_and_torch(rows: int, n: int, k: int, bias: bool) -> None:
    x, w, b = random_product(rows, n, k, bias)
    out = kernels.panel_linear(x, pack_panels(w), n, b)
    assert_matches_float64(out, x, w, b)
    torch.testing.assert_close(out, F.linear(x, w, b), rtol=1e-4, atol=1e-4 * k**0.5)


@pytest.mark.parametrize("rows", [1, 6, 13, 64])
@pytest.mark.parametrize("n,k", [(5, 3), (130, 1536), (963, 129)])
def test_fp16_panels_match_float64_of_the_rounded_weight(rows: int, n: int, k: int) -> None:
    x, w, b = random_product(rows, n, k, True)
    half = w.half()
    assert_matches_float64(kernels.panel_linear(x, pack_panels(half), n, b), x, half.float(), b)


def test_panel_linear_rows_do_not_depend_on_batch_or_threads() -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 333, generator=g)
    w = torch.randn(1027, 333, generator=g)
    panels = pack_panels(w)
    alone = torch.cat([kernels.panel_linear(x[i : i + 1], panels, 1027, threads=1) for i in range(64)])
    for rows in (2, 5, 6, 7, 12, 13, 40, 64):
        for threads in (1, 2, 3):
            assert torch.equal(kernels.panel_linear(x[:rows], panels, 1027, threads=threads), alone[:rows])
    assert torch.equal(kernels.panel_linear(x.flip(0), panels, 1027), alone.flip(0))


def test_panel_linear_empty_shapes() -> None:
    assert kernels.panel_linear(torch.randn(0, 16), pack_panels(torch.randn(8, 16)), 8).shape == (0, 8)
    out = kernels.panel_linear(torch.randn(3, 0), pack_panels(torch.randn(4, 0)), 4, torch.arange(4.0))
    assert torch.equal(out, torch.arange(4.0).expand(3, 4))


def test_panel_linear_refuses_bad_arguments() -> None:
    x, w = torch.randn(2, 16), torch.randn(20, 16)
    panels = pack_panels(w)
    with pytest.raises(ValueError, match="x must be"):
        kernels.panel_linear(x.double(), panels, 20)
    with pytest.raises(ValueError, match="panels must be"):
        kernels.panel_linear(x, panels, 40)  # three panels expected
    with pytest.raises(ValueError, match="panels must be"):
        kernels.panel_linear(torch.randn(2, 15), panels, 20)
    with pytest.raises(ValueError, match="bias must be"):
        kernels.panel_linear(x, panels, 20, torch.randn(19))


def test_an_encoder_linear_takes_its_panels_up_to_the_limit(monkeypatch) -> None:
    layer = Linear(48, 40, bias=True)
    torch.nn.init.normal_(layer.weight)
    torch.nn.init.normal_(layer.bias)
    assert add_panel_weights(layer) == 0  # not an encoder
    layer.is_encoder = True
    assert add_panel_weights(layer) == 3 * 16 * 48 * 4
    calls: list[int] = []
    real = DecodeKernels.panel_linear

    def counted(self: DecodeKernels, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        calls.append(x.shape[0])
        return real(self, x, *args, **kwargs)

    kernels.rmsnorm  # noqa: B018  (loads the kernels: the dispatch point never waits for them)
    monkeypatch.setattr(DecodeKernels, "panel_linear", counted)
    for rows in (1, 13, PANEL_MAX_ROWS, PANEL_MAX_ROWS + 1):
        x = torch.randn(rows, 48)
        with torch.inference_mode():
            out = layer(x)
        assert_matches_float64(out, x, layer.weight.detach(), layer.bias.detach())
    assert calls == [1, 13, PANEL_MAX_ROWS]  # not beyond PANEL_MAX_ROWS
