"""Our model code equals transformers on tiny random checkpoints: prefill, cached-prefix extend,
decode, and mixed batches, through the real KV pools and the torch attention backend."""

from __future__ import annotations

import pytest
import torch

from radixlm.runtime.models.architectures import get_model_class
from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.llama import LlamaForCausalLM
from radixlm.runtime.weights.checkpoint import iter_safetensors
from tests.helpers.model_conformance import Reference, check_all_logits, check_engine_greedy
from tests.helpers.model_helpers import (
    save_tiny_model,
    tiny_llama_config,
    tiny_qwen2_config,
    tiny_qwen3_config,
)

LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
}
CONFIGS = {
    "llama-gqa": lambda: tiny_llama_config(),
    "llama-tied-llama3-rope": lambda: tiny_llama_config(
        tie_word_embeddings=True, rope_parameters=LLAMA3_ROPE
    ),
    "qwen2-bias": lambda: tiny_qwen2_config(),
    "qwen3-qk-norm": lambda: tiny_qwen3_config(),
}


@pytest.fixture(scope="module", params=list(CONFIGS))
def ref(request, tmp_path_factory) -> Reference:
    model_dir = save_tiny_model(CONFIGS[request.param](), tmp_path_factory.mktemp(request.param))
    return Reference(model_dir)


def test_logits_match_transformers(ref: Reference) -> None:
    check_all_logits(ref)


def test_engine_greedy_matches_transformers(ref: Reference) -> None:
    check_engine_greedy(ref.model_dir)


def test_load_weights_rejects_incomplete_or_mismatched_checkpoints(tmp_path) -> None:
    config = tiny_llama_config()
    model_dir = save_tiny_model(config, tmp_path, with_tokenizer=False)
    import json

    cfg = ModelConfig.from_hf(json.loads((model_dir / "config.json").read_text()))
    weights = dict(iter_safetensors(model_dir))
    model = LlamaForCausalLM(cfg)
    model.load_weights(weights.items())  # complete: fine
    missing = {k: v for k, v in weights.items() if not k.endswith("layers.1.self_attn.k_proj.weight")}
    with pytest.raises(ValueError, match=r"missing weights: model.layers.1.self_attn.qkv_proj.weight\[1\]"):
        LlamaForCausalLM(cfg).load_weights(missing.items())
    with pytest.raises(ValueError, match="unexpected checkpoint tensor 'model.layers.9.foo.weight'"):
        LlamaForCausalLM(cfg).load_weights([*weights.items(), ("model.layers.9.foo.weight", torch.ones(1))])
    bad = dict(weights, **{"model.norm.weight": torch.ones(3)})
    with pytest.raises(ValueError, match="model.norm.weight: checkpoint shape"):
        LlamaForCausalLM(cfg).load_weights(bad.items())


def test_unknown_architecture_lists_supported() -> None:
    with pytest.raises(ValueError, match="GPT2LMHeadModel.*LlamaForCausalLM.*Qwen2ForCausalLM"):
        get_model_class("GPT2LMHeadModel")


BASE = dict(
    architectures=["LlamaForCausalLM"],
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    vocab_size=100,
)


@pytest.mark.parametrize(
    "extra, theta, scaling",
    [
        ({"rope_theta": 5e5}, 5e5, None),
        ({"rope_parameters": {"rope_type": "default", "rope_theta": 1e5}}, 1e5, None),
        ({"rope_theta": 1e4, "rope_scaling": {"type": "linear", "factor": 2.0}}, 1e4, "linear"),
        ({"rope_parameters": dict(LLAMA3_ROPE)}, 5e5, "llama3"),
        ({}, 1e4, None),
    ],
)
def test_model_config_reads_transformers_4_and_5_rope_layouts(extra, theta, scaling) -> None:
    cfg = ModelConfig.from_hf({**BASE, **extra})
    assert cfg.rope_theta == theta
    assert (cfg.rope_scaling or {}).get("rope_type", (cfg.rope_scaling or {}).get("type")) == scaling
    assert (cfg.num_kv_heads, cfg.head_dim, cfg.tie_word_embeddings) == (4, 16, False)
