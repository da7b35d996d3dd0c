"""Tensor parallelism for every dense family we serve natively, on CPU with gloo: tp_size=2 gives
tp_size=1's greedy tokens and logprobs (the chosen token's and the top 5) on tiny random checkpoints.

Llama and Qwen2 are covered in ``test_tensor_parallel.py``, Mixtral and Qwen3-MoE in
``test_tensor_parallel_moe.py``. Here: Gemma 2 (attention and final-logit soft-caps, sliding layers,
``query_pre_attn_scalar``, tied embedding scaled by ``sqrt(hidden)``), Gemma 3 (per-head q/k norms,
two ropes, one KV head that each rank keeps a copy of), Mistral's window, Qwen3, Phi-4-mini (partial
LongRoPE, tied), Granite's multipliers, SmolLM3's NoPE layers, and OLMo 2 (one KV head) and OLMoE,
whose q/k norms span all heads. Prompts are longer than the windows of 8 keys and are prefilled in
chunks of 16. A server launched with tp_size=2 serves Gemma 3 as tp_size=1 does; a model whose
heads do not divide, or a family that does not split, is refused naming why."""

from __future__ import annotations

import httpx
import pytest

from radixlm.runtime.distributed.partition import TPShard
from radixlm.runtime.distributed.shard_llama import shard_llama
from radixlm.runtime.models.bert import EncoderModel
from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.gemma import GemmaForCausalLM
from radixlm.runtime.models.llama_pooled import LlamaEmbeddingModel
from radixlm.runtime.server.launch import launch_server
from tests.helpers.embedding_models import tiny_bert_config
from tests.helpers.engines import make_engine
from tests.helpers.model_helpers import save_tiny_model, tiny_llama_config, tiny_qwen3_config
from tests.runtime.models.test_dense_families import _config, phi4_mini_config
from tests.runtime.models.test_gemma import tiny_gemma2_config, tiny_gemma3_config, tiny_mistral_config
from tests.runtime.models.test_moe import tiny_olmoe_config


def _with(config, **fields):
    """``config`` with ``fields`` set (the tiny Gemma configs take no overrides)."""
    for key, value in fields.items():
        setattr(config, key, value)
    return config


CONFIGS = {
    "gemma2": tiny_gemma2_config,  # tied
    "gemma3-kv1": lambda: _with(tiny_gemma3_config(), num_key_value_heads=1),  # as Gemma 3 1B
    "mistral-window": tiny_mistral_config,
    "qwen3": tiny_qwen3_config,
    "phi4-mini": phi4_mini_config,
    "granite": lambda: _config(
        "granite",
        embedding_multiplier=6.0,
        residual_multiplier=0.3,
        attention_multiplier=0.2,
        logits_scaling=4.0,
    ),
    "smollm3": lambda: _config("smollm3", num_hidden_layers=4, no_rope_layer_interval=2),
    "olmo2-kv1": lambda: _config("olmo2", num_key_value_heads=1),
    "olmoe-clip-qkv": lambda: tiny_olmoe_config(clip_qkv=2.0),
}


PROMPTS = ["The quick brown fox jumps over the lazy dog", "A shared system prompt, then user one", "x" * 40]
GREEDY = {"max_new_tokens": 16, "temperature": 0, "ignore_eos": True}
LOGPROB_TOL = 2e-5  # fp32: only the order of the partial sums differs


def _generate(model_dir: str, tp_size: int) -> list[dict]:
    with make_engine(model_dir, device="cpu", tp_size=tp_size, chunked_prefill_size=16) as engine:
        out = engine.generate(PROMPTS, GREEDY, return_logprob=True, top_logprobs_num=5)
        engine.check_kv_integrity()
    return out


def _logprobs(out: dict) -> list[float]:
    meta = out["meta_info"]
    chosen = [t[0] for t in meta["output_token_logprobs"]]
    return chosen + [t[0] for top in meta["output_top_logprobs"] for t in top]


@pytest.mark.parametrize("name", list(CONFIGS))
def test_tp2_matches_tp1(name: str, tmp_path) -> None:
    model_dir = str(save_tiny_model(CONFIGS[name](), tmp_path))
    expected = _generate(model_dir, 1)
    got = _generate(model_dir, 2)
    assert [o["output_ids"] for o in got] == [o["output_ids"] for o in expected]
    for a, b in zip(got, expected):
        assert _logprobs(a) == pytest.approx(_logprobs(b), abs=LOGPROB_TOL)


def test_server_with_tp2_serves_gemma3_as_tp1(tmp_path) -> None:
    model_dir = str(save_tiny_model(tiny_gemma3_config(), tmp_path))
    expected = _generate(model_dir, 1)[0]
    body = {"text": PROMPTS[0], "sampling_params": GREEDY, "return_logprob": True, "top_logprobs_num": 5}
    with launch_server(model_dir, device="cpu", num_threads=1, kv_cache_gb=0.02, tp_size=2) as server:
        reply = httpx.post(server.url + "/generate", json=body, timeout=120)
        assert reply.status_code == 200, reply.text
        ranks = httpx.get(server.url + "/get_server_info", timeout=30).json()["tp_ranks"]
    assert [r["tp_rank"] for r in ranks] == [0, 1]
    got = reply.json()
    assert got["output_ids"] == expected["output_ids"]
    assert _logprobs(got) == pytest.approx(_logprobs(expected), abs=LOGPROB_TOL)


def _model(config, architecture: str, cls):
    return cls(ModelConfig.from_hf(config.to_dict() | {"architectures": [architecture]}))


def test_what_does_not_split_is_refused_naming_why() -> None:
    # Gemma 3's 4 query heads over 3 ranks (the engine stops every rank: test_tensor_parallel.py)
    with pytest.raises(ValueError, match=r"num_attention_heads \(4\) is not divisible by tp_size 3"):
        shard_llama(_model(tiny_gemma3_config(), "Gemma3ForCausalLM", GemmaForCausalLM), TPShard(0, 3))
    # embedding models: their pooled hidden states are no vocabulary slices to gather
    with pytest.raises(ValueError, match="LlamaForCausalLM cannot be split .* tp_size 1"):
        shard_llama(_model(tiny_llama_config(), "LlamaForCausalLM", LlamaEmbeddingModel), TPShard(0, 2))
    bert = tiny_bert_config().to_dict() | {"architectures": ["BertModel"]}
    with pytest.raises(ValueError, match="EncoderModel cannot be split .* tp_size 1"):
        shard_llama(EncoderModel(bert), TPShard(0, 2))
