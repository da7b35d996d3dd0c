"""ModelRunner: device/dtype resolution, pool sizing, and greedy decoding against transformers."""

from __future__ import annotations

import pytest
import torch

from radixlm.runtime.attention.torch_backend import TorchAttentionBackend
from radixlm.runtime.executor.model_runner import resolve_device, resolve_dtype
from radixlm.runtime.memory.kv_pool import KVPool
from tests.helpers.model_helpers import greedy_generate, make_runner, save_tiny_model, tiny_llama_config


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return save_tiny_model(tiny_llama_config(), tmp_path_factory.mktemp("tiny"))


def test_runner_exposes_model_pools_and_backend(tiny_dir) -> None:
    runner = make_runner(tiny_dir, max_total_tokens=1000, max_running_requests=8, context_length=256)
    assert runner.device == torch.device("cpu") and runner.dtype == torch.float32
    assert runner.context_length == 256 and runner.vocab_size == 320
    assert runner.req_to_token_pool.req_to_token.shape == (9, 256)
    assert runner.kv_pool.num_slots == 1000 == runner.kv_pool.allocator.available_size()
    assert runner.kv_pool.k_buffers[0].shape == (1001, 2, 16) and len(runner.kv_pool.k_buffers) == 2
    assert isinstance(runner.attn_backend, TorchAttentionBackend)
    assert runner.cuda_graph_runner is None
    assert runner.loaded.architecture == "LlamaForCausalLM"
    assert runner.loaded.eos_token_ids == [2] and "<|im_start|>" in runner.loaded.chat_template
    assert all(p.dtype == torch.float32 and not p.requires_grad for p in runner.model.parameters())


def test_cpu_kv_pool_is_sized_from_kv_cache_gb(tiny_dir) -> None:
    runner = make_runner(tiny_dir, max_total_tokens=None, kv_cache_gb=0.01)
    per_slot = KVPool.bytes_per_slot(2, 2, 16, torch.float32)
    assert runner.kv_pool.num_slots == int(0.01 * (1 << 30) // per_slot)


def test_model_context_length_is_the_default(tiny_dir) -> None:
    assert make_runner(tiny_dir, context_length=None).context_length == 512


def test_device_and_dtype_resolution() -> None:
    cpu = torch.device("cpu")
    assert resolve_dtype("auto", cpu) == torch.float32
    assert resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16
    assert resolve_dtype("bfloat16", cpu) == torch.bfloat16
    assert resolve_device("cpu") == cpu
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="unknown dtype 'int3'"):
        resolve_dtype("int3", cpu)


def test_greedy_decoding_matches_transformers_generate(tiny_dir) -> None:
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(str(tiny_dir), dtype=torch.float32).eval()
    prompts = [[5, 9, 33, 100], [7], list(range(40, 70))]
    ours = greedy_generate(make_runner(tiny_dir), prompts, max_new_tokens=24)
    for prompt, out in zip(prompts, ours):
        ids = torch.tensor([prompt])
        ref = hf.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=24,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
        )[0, len(prompt) :].tolist()
        assert out == ref
