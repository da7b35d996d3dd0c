"""GPU-only checks: bf16 model forward (Triton vs reference), long-context decode, CUDA graphs."""

from __future__ import annotations

import random

import pytest
import torch

from radixlm.kernels.decode_attention import decode_attention_torch, decode_attention_triton
from radixlm.runtime.executor.cuda_graph_runner import CudaGraphRunner
from tests.helpers.model_helpers import (
    PagedSession,
    assert_logits_close,
    make_runner,
    save_tiny_model,
    tiny_llama_config,
)
from tests.kernels.paged_fixtures import random_paged_kv
from tests.kernels.reference_backend import ReferenceAttentionBackend

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    cfg = tiny_llama_config(
        num_attention_heads=8,
        num_key_value_heads=2,
        hidden_size=512,
        num_hidden_layers=3,
        max_position_embeddings=4096,
    )  # head_dim 64
    return save_tiny_model(cfg, tmp_path_factory.mktemp("gpu_llama"), with_tokenizer=False)


def _runner(path, backend: str, dtype: str, **kw):
    runner = make_runner(
        path,
        device="cuda",
        dtype=dtype,
        attention_backend=backend,
        context_length=4096,
        max_total_tokens=16384,
        max_running_requests=32,
        **kw,
    )
    if backend == "torch":
        runner.attn_backend = ReferenceAttentionBackend()
    return runner


def _step_logits(runner, prompts: list[list[int]], steps: int) -> list[torch.Tensor]:
    """Extend, extend on a shared prefix, then decode steps fed fixed tokens (not argmax, so a
    near-tie cannot send two runs down different paths)."""
    rnd = random.Random(len(prompts))
    s = PagedSession(runner)
    rows = [s.open() for _ in prompts]
    out = [torch.stack(s.extend(rows, prompts))]
    c = s.share_prefix(rows[0], len(prompts[0]) // 2)
    out.append(torch.stack(s.extend([c], [[7, 8, 9]])))
    rows.append(c)
    for _ in range(steps):
        out.append(s.decode(rows, [rnd.randrange(3, 300) for _ in rows]))
    return out


def _prompts(n: int, seed: int) -> list[list[int]]:
    rnd = random.Random(seed)
    return [[rnd.randrange(3, 300) for _ in range(rnd.randint(5, 1500))] for _ in range(n)]


def test_model_triton_equals_reference_in_float32(llama_dir):
    prompts = _prompts(5, 0)
    ref = _step_logits(_runner(llama_dir, "torch", "float32"), prompts, 4)
    ours = _step_logits(_runner(llama_dir, "triton", "float32"), prompts, 4)
    for o, r in zip(ours, ref):
        assert_logits_close(o, r, rtol=1e-4)


def test_model_triton_in_bfloat16_is_as_close_to_float32_as_the_reference(llama_dir):
    """bf16 logits of 8 round by ~0.03 and the error grows over 3 layers and 1500-token prompts, so a
    fixed bound against the bf16 reference says little (the GPU runs of 2026-11-30 and 2026-12-04 were
    off by 0.28 and 0.30). Both bf16 paths are held to the float32 truth instead: Triton's error may
    be at most 1.5x the reference backend's own."""
    prompts = _prompts(5, 0)
    exact = _step_logits(_runner(llama_dir, "torch", "float32"), prompts, 4)
    ref = _step_logits(_runner(llama_dir, "torch", "bfloat16"), prompts, 4)
    ours = _step_logits(_runner(llama_dir, "triton", "bfloat16"), prompts, 4)
    for o, r, e in zip(ours, ref, exact):
        ref_err = (r.float() - e).abs().max().item()
        our_err = (o.float() - e).abs().max().item()
        assert our_err <= 1.5 * ref_err + 1e-3 * e.abs().max().item(), (our_err, ref_err)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_long_context_decode(dtype):
    rnd = random.Random(1)
    seq_lens = [rnd.randint(1, 5000) for _ in range(6)]
    kv = random_paged_kv(seq_lens, 4, 128, torch.device("cuda"), max_context=5000)
    q = torch.randn(6, 16, 128, device="cuda", dtype=dtype)
    args = (
        q,
        kv.k_buffer.to(dtype),
        kv.v_buffer.to(dtype),
        kv.req_to_token,
        kv.req_pool_indices,
        torch.tensor(seq_lens, device="cuda"),
        0.088,
    )
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(
        decode_attention_triton(*args), decode_attention_torch(*args), atol=tol, rtol=tol
    )


@pytest.mark.parametrize("bs", [1, 3, 5])
def test_cuda_graph_replay_equals_eager(llama_dir, bs):
    prompts = _prompts(bs, bs)
    eager = _runner(llama_dir, "triton", "float32")
    graphed = _runner(llama_dir, "triton", "float32")
    graph_runner = CudaGraphRunner(graphed, max_bs=8)
    plain_forward = graphed.forward
    # The integration the model runner does: replay when the batch fits a captured graph.
    graphed.forward = lambda fb: graph_runner.replay(fb) if graph_runner.can_run(fb) else plain_forward(fb)
    for o, r in zip(_step_logits(graphed, prompts, 6), _step_logits(eager, prompts, 6)):
        assert_logits_close(o, r, rtol=1e-4)  # padding changes split counts and GEMM shapes
