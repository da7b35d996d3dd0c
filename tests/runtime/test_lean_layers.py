"""The CPU fast paths of the layers give the same numbers as the kernel references they replace."""

from __future__ import annotations

import pytest
import torch

from radixlm.kernels.activation import silu_and_mul
from radixlm.kernels.cpu import build
from radixlm.kernels.decode_attention import decode_attention_torch
from radixlm.kernels.rmsnorm import fused_add_rmsnorm_torch, rmsnorm_torch
from radixlm.kernels.rotary import apply_rotary_torch
from radixlm.runtime.attention import torch_decode
from radixlm.runtime.attention.torch_decode import decode_attention_planned, plan_decode
from radixlm.runtime.layers.rmsnorm import RMSNorm
from radixlm.runtime.layers.rotary import RotaryEmbedding


@pytest.mark.parametrize("kernel", [True, False], ids=["cpp-kernel", "torch-fallback"])
def test_rmsnorm_fp32_matches_reference(kernel: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The C++ kernel equals the reference up to the mean's summation order (an ulp or two); the
    fallback (no compiler) is torch's ``F.rms_norm``, the same bits."""
    if kernel and build.load_decode_kernels() is None:
        pytest.skip("the CPU decode kernels cannot be built here")
    if not kernel:
        monkeypatch.setattr(build.DECODE_KERNELS, "get", lambda: None)
    torch.manual_seed(0)
    norm = RMSNorm(96, 1e-5)
    norm.weight.data.normal_()
    x, res = torch.randn(7, 96), torch.randn(7, 96)
    close = torch.equal if not kernel else lambda a, b: torch.allclose(a, b, rtol=1e-6, atol=1e-6)
    assert close(norm(x), rmsnorm_torch(x, norm.weight, 1e-5))
    out, h = norm.add_and_norm(x, res)
    ref_out, ref_h = fused_add_rmsnorm_torch(x, res, norm.weight, 1e-5)
    assert close(out, ref_out) and torch.equal(h, ref_h)


@pytest.mark.parametrize("kernel", [True, False], ids=["cpp-kernel", "torch-ops"])
def test_rotary_matches_reference_and_follows_new_positions(
    kernel: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if kernel and build.load_decode_kernels() is None:
        pytest.skip("the CPU decode kernels cannot be built here")
    if not kernel:
        monkeypatch.setattr(build.DECODE_KERNELS, "get", lambda: None)
    torch.manual_seed(0)
    rotary = RotaryEmbedding(64, 512, 10000.0)
    qkv = torch.randn(5, (9 + 2 * 3) * 64)
    q = qkv[:, : 9 * 64].view(5, 9, 64)  # strided views, as the fused projection gives them
    k = qkv[:, 9 * 64 : 12 * 64].view(5, 3, 64)
    for positions in (torch.tensor([0, 1, 2, 3, 4]), torch.tensor([400, 17, 3, 250, 511])):
        out_q, out_k = rotary(positions, q, k)
        ref_q, ref_k = apply_rotary_torch(q, k, positions, rotary.cos_sin_cache)
        assert torch.equal(out_q, ref_q) and torch.equal(out_k, ref_k)


@pytest.mark.parametrize("kernel", [True, False], ids=["cpp-kernel", "torch-ops"])
@pytest.mark.parametrize("rows,width", [(1, 16), (3, 8), (64, 3072), (5, 2 * 13)])
def test_silu_and_mul_matches_reference(
    kernel: bool, rows: int, width: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ragged widths (a vector tail), one row to a decode batch's 64 (threaded), and inputs from
    large negative to large positive gates: within a few ulp of torch's ``silu(gate) * up``."""
    if kernel and build.load_decode_kernels() is None:
        pytest.skip("the CPU decode kernels cannot be built here")
    if not kernel:
        monkeypatch.setattr(build.DECODE_KERNELS, "get", lambda: None)
    torch.manual_seed(0)
    x = torch.randn(rows, width) * 8
    edges = torch.tensor([-100.0, -87.5, 0.0, -0.0, 1e-6, 90.0])  # exp's clamp, signs of zero, overflow
    x[0, : min(6, width // 2)] = edges[: width // 2]
    out = silu_and_mul(x)
    ref = torch.nn.functional.silu(x[:, : width // 2]) * x[:, width // 2 :]
    assert out.shape == (rows, width // 2)
    torch.testing.assert_close(out, ref, rtol=6e-7, atol=1e-30)  # ~5 ulp
    if rows > 1:  # a row's result does not depend on the rows beside it
        assert torch.equal(silu_and_mul(x[1:2].contiguous())[0], out[1])


@pytest.mark.parametrize("kernel", [True, False], ids=["cpp-kernel", "torch-gather"])
def test_planned_decode_attention_matches_reference_on_ragged_lengths(
    kernel: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if kernel and build.load_decode_kernels() is None:
        pytest.skip("the CPU decode kernels cannot be built here")
    if not kernel:
        monkeypatch.setattr(build.DECODE_KERNELS, "get", lambda: None)
    torch.manual_seed(0)
    slots, heads_q, heads_kv, dim = 200, 6, 2, 16
    k_buf, v_buf = torch.randn(slots + 1, heads_kv, dim), torch.randn(slots + 1, heads_kv, dim)
    req_to_token = torch.randint(1, slots + 1, (8, 64))
    rows = torch.tensor([5, 0, 3])
    for lens in ([9, 40, 1], [12, 12, 12]):
        seq_lens = torch.tensor(lens)
        q = torch.randn(3, heads_q, dim)
        plan = plan_decode(req_to_token, rows, seq_lens, lens, torch_decode.in_place_decode_available(k_buf))
        out = decode_attention_planned(q, k_buf, v_buf, plan, 0.25)
        ref = decode_attention_torch(q, k_buf, v_buf, req_to_token, rows, seq_lens, 0.25)
        torch.testing.assert_close(out, ref, atol=1e-6, rtol=1e-5)


def test_rotary_refuses_positions_outside_its_table() -> None:
    rotary = RotaryEmbedding(16, 32, 10000.0)
    q, k = torch.randn(2, 2, 16), torch.randn(2, 1, 16)
    with pytest.raises(ValueError, match="positions"):
        rotary(torch.tensor([3, 32]), q, k)
