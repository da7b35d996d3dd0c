"""The model layers' RMSNorm (plain and fused with the residual add) and rotary go through one
dispatch point each (``radixlm.kernels._launch.use_triton``): forcing the Triton kernels gives the
torch path's logits. Runs on the CPU through the Triton interpreter, or on CUDA.
"""

from __future__ import annotations

import pytest
import torch

from radixlm.kernels import _launch
from tests.helpers.model_helpers import (
    PagedSession,
    assert_logits_close,
    make_runner,
    save_tiny_model,
    tiny_llama_config,
    tiny_qwen3_config,
)
from tests.kernels.reference_backend import ReferenceAttentionBackend

pytestmark = pytest.mark.triton_interpret


def _logits(model_dir, device: torch.device, dtype: str) -> list[torch.Tensor]:
    runner = make_runner(model_dir, device=str(device), dtype=dtype)
    runner.attn_backend = ReferenceAttentionBackend()
    s = PagedSession(runner)
    a, b = s.open(), s.open()
    logits = s.extend([a, b], [[5, 9, 13, 200, 7, 3, 3, 41], [17, 4]])
    logits += list(s.decode([a, b], [11, 12]))
    return logits


@pytest.mark.parametrize(
    "dtype,rtol",
    [
        ("float32", 1e-4),
        pytest.param(
            "bfloat16",
            3e-2,
            marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="bf16 checked on CUDA only"),
        ),
    ],
)
@pytest.mark.parametrize("make_config", [tiny_llama_config, tiny_qwen3_config])
def test_triton_norm_and_rotary_match_torch_in_the_model(
    device, tmp_path, monkeypatch, make_config, dtype, rtol
):
    model_dir = save_tiny_model(make_config(), tmp_path, with_tokenizer=False)
    monkeypatch.setattr(_launch, "use_triton", lambda x: False)
    ref = _logits(model_dir, device, dtype)
    monkeypatch.setattr(_launch, "use_triton", lambda x: True)
    ours = _logits(model_dir, device, dtype)
    for o, r in zip(ours, ref):
        assert_logits_close(o, r, rtol=rtol)


def test_dispatch_rule_is_cuda_only():
    assert not _launch.use_triton(torch.zeros(1))
