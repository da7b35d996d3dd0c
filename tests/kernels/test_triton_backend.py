"""A tiny Llama through the Triton backend gives the torch backend's logits (extend, prefix, decode).

Runs on the CPU through the Triton interpreter (a few hundred program instances), or on CUDA.
"""

from __future__ import annotations

import pytest
import torch

from radixlm.runtime.attention.triton_backend import TritonAttentionBackend
from tests.helpers.model_helpers import (
    PagedSession,
    assert_logits_close,
    make_runner,
    save_tiny_model,
    tiny_llama_config,
)
from tests.kernels.reference_backend import ReferenceAttentionBackend

pytestmark = pytest.mark.triton_interpret


@pytest.fixture(scope="module")
def tiny_llama_dir(tmp_path_factory):
    # 3 query heads per KV head (GQA ratio 3).
    cfg = tiny_llama_config(num_attention_heads=6, num_key_value_heads=2, hidden_size=96)
    return save_tiny_model(cfg, tmp_path_factory.mktemp("tiny_llama"), with_tokenizer=False)


def _steps(runner) -> list[torch.Tensor]:
    """Extend two prompts, reuse a cached prefix, then two decode steps; all logits."""
    s = PagedSession(runner)
    a, b = s.open(), s.open()
    logits = s.extend([a, b], [[5, 9, 13, 200, 7, 3, 3, 41, 8], [17, 4]])
    c = s.share_prefix(a, 6)
    logits += s.extend([c, b], [[99, 100, 101], [5]])
    logits += list(s.decode([a, b, c], [11, 12, 13]))
    logits += list(s.decode([c, a, b], [1, 2, 3]))
    return logits


def test_triton_backend_matches_torch_backend(device, tiny_llama_dir):
    runner = make_runner(tiny_llama_dir, device=str(device))
    runner.attn_backend = ReferenceAttentionBackend()
    ref = _steps(runner)
    runner = make_runner(tiny_llama_dir, device=str(device), attention_backend="triton")
    assert isinstance(runner.attn_backend, TritonAttentionBackend)
    ours = _steps(runner)
    for o, r in zip(ours, ref):
        assert_logits_close(o, r, rtol=1e-4)


def test_triton_backend_windows_and_softcaps(device, tmp_path):
    """Gemma 2 (window 4 on layers 0 and 2, capped scores) through the Triton kernels equals the
    per-request torch references: prompts and decodes run past the window."""
    from tests.runtime.models.test_gemma import tiny_gemma2_config

    cfg = tiny_gemma2_config()
    cfg.sliding_window = 4
    model_dir = save_tiny_model(cfg, tmp_path, with_tokenizer=False)
    runner = make_runner(model_dir, device=str(device))
    runner.attn_backend = ReferenceAttentionBackend()
    ref = _steps(runner)
    runner = make_runner(model_dir, device=str(device), attention_backend="triton")
    for o, r in zip(_steps(runner), ref):
        assert_logits_close(o, r, rtol=1e-4)
