"""Triton RMSNorm (plain and fused with the residual add) equals the torch reference."""

from __future__ import annotations

import pytest
import torch

from radixlm.kernels.rmsnorm import (
    fused_add_rmsnorm_torch,
    fused_add_rmsnorm_triton,
    rmsnorm_torch,
    rmsnorm_triton,
)

pytestmark = pytest.mark.triton_interpret


@pytest.mark.parametrize("hidden", [64, 96])
def test_rmsnorm(device, hidden):
    x = torch.randn(5, hidden, device=device) * 3
    w = torch.randn(hidden, device=device)
    torch.testing.assert_close(rmsnorm_triton(x, w, 1e-5), rmsnorm_torch(x, w, 1e-5), atol=1e-5, rtol=1e-5)


def test_fused_add_rmsnorm(device):
    x = torch.randn(4, 48, device=device)
    res = torch.randn(4, 48, device=device)
    w = torch.randn(48, device=device)
    out, h = fused_add_rmsnorm_triton(x, res, w, 1e-6)
    ref_out, ref_h = fused_add_rmsnorm_torch(x, res, w, 1e-6)
    torch.testing.assert_close(h, ref_h, atol=0, rtol=0)
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=1e-5)


def test_reference_matches_hf_llama_rmsnorm():
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    norm = LlamaRMSNorm(32, eps=1e-5)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(32))
    x = torch.randn(3, 32)
    torch.testing.assert_close(rmsnorm_torch(x, norm.weight, 1e-5), norm(x), atol=0, rtol=0)
