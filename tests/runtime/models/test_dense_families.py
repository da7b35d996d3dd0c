"""Llama 3.2, Phi-3 / Phi-4-mini, Granite, OLMo 2, SmolLM3 and Qwen2/Qwen3 with YaRN equal transformers
on tiny random checkpoints: logits through our KV pools (prefill, cached-prefix extend, decode, mixed
batches) and greedy generation through an Engine. Rope scaling configs reach past their original
context (YaRN's ramp and mscale, LongRoPE's long factors, dynamic NTK's stretch all matter)."""

from __future__ import annotations

import json

import pytest
import torch

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.phi3 import Phi3ForCausalLM
from radixlm.runtime.models.smollm3 import SmolLM3ForCausalLM
from radixlm.runtime.weights.checkpoint import iter_safetensors
from tests.helpers.model_conformance import Reference, check_all_logits, check_engine_greedy, tokens
from tests.helpers.model_helpers import (
    save_tiny_model,
    tiny_kwargs,
    tiny_llama_config,
    tiny_qwen2_config,
    tiny_qwen3_config,
)

LLAMA_3_2_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "factor": 32.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}
SHORT = [1.0, 1.05, 1.2, 1.4, 1.7, 2.1, 2.6, 3.2]
LONG = [1.0, 1.6, 2.7, 4.5, 7.4, 12.2, 20.1, 33.0]


def _config(model_type: str, **overrides):
    from transformers import AutoConfig

    return AutoConfig.for_model(model_type, **tiny_kwargs(**overrides))


def _longrope(n: int, theta: float = 10000.0) -> dict:
    return {"rope_type": "longrope", "rope_theta": theta, "short_factor": SHORT[:n], "long_factor": LONG[:n]}


def phi3_config(original: int = 64, **overrides):
    """Phi-3-mini's shape: LongRoPE (attention factor from 512 / ``original``), no sliding window."""
    kwargs = dict(
        original_max_position_embeddings=original, rope_parameters=_longrope(8), sliding_window=None
    )
    return _config("phi3", **(kwargs | overrides))


def phi4_mini_config(original: int = 64):
    """Phi-4-mini's shape: LongRoPE on the first 3/4 of each head (12 of 16 dims), tied embeddings."""
    return phi3_config(
        original,
        rope_parameters=_longrope(6) | {"partial_rotary_factor": 0.75},
        partial_rotary_factor=0.75,
        tie_word_embeddings=True,
    )


CONFIGS = {
    "llama3.2-rope-tied": lambda: tiny_llama_config(tie_word_embeddings=True, rope_parameters=LLAMA_3_2_ROPE),
    "qwen2-yarn": lambda: tiny_qwen2_config(
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": 1e6,
            "factor": 4.0,
            "original_max_position_embeddings": 16,
        }
    ),
    "qwen3-yarn": lambda: tiny_qwen3_config(
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": 1e6,
            "factor": 4.0,
            "original_max_position_embeddings": 32,
        }
    ),
    "phi3-longrope": phi3_config,
    "phi4-mini-partial-longrope": phi4_mini_config,
    "granite": lambda: _config(
        "granite",
        embedding_multiplier=6.0,
        residual_multiplier=0.3,
        attention_multiplier=0.2,
        logits_scaling=4.0,
    ),
    "olmo2": lambda: _config("olmo2"),
    "smollm3-nope-layers": lambda: _config(
        "smollm3", num_hidden_layers=4, no_rope_layer_interval=2, tie_word_embeddings=True
    ),
}


@pytest.fixture(scope="module", params=list(CONFIGS))
def ref(request, tmp_path_factory) -> Reference:
    model_dir = save_tiny_model(CONFIGS[request.param](), tmp_path_factory.mktemp(request.param))
    return Reference(model_dir)


def test_logits_match_transformers(ref: Reference) -> None:
    check_all_logits(ref)


def test_engine_greedy_matches_transformers(ref: Reference) -> None:
    check_engine_greedy(ref.model_dir)


@torch.no_grad()
def _stepwise_logits(hf, seq: list[int]) -> torch.Tensor:
    """transformers fed one token at a time on its cache: each forward's last position is the token's."""
    from transformers import DynamicCache

    cache = DynamicCache(config=hf.config)
    return torch.stack([hf(torch.tensor([[t]]), cache=cache, use_cache=True).logits[0, -1] for t in seq])


@pytest.mark.parametrize(
    "name, config",
    [
        ("phi4-mini-longrope-from-24", lambda: phi4_mini_config(original=24)),
        (
            "llama-dynamic-ntk-from-24",
            lambda: tiny_llama_config(
                max_position_embeddings=24,
                rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4},
            ),
        ),
    ],
)
def test_length_dependent_rope_is_chosen_per_token_position(name, config, tmp_path) -> None:
    """LongRoPE and dynamic NTK past the original length: prefill, an extend that crosses it and decode
    steps equal transformers run one token at a time (the frequencies of a forward ending at each token);
    transformers' forward over the whole sequence rotates every position with the long/stretched
    frequencies instead, and differs."""
    ref = Reference(save_tiny_model(config(), tmp_path / name))
    seq = tokens(36, 7)
    within = ref.logits(seq[:24])  # first: transformers' dynamic rope keeps the longest length it saw
    stepwise = _stepwise_logits(ref.hf, seq)
    s = ref.session
    row = s.open()
    ours = [
        s.extend([row], [seq[:16]], all_logits=True)[0],
        s.extend([row], [seq[16:30]], all_logits=True)[0],
    ]
    ours += [s.decode([row], [t]) for t in seq[30:]]
    s.close(row)
    ref.close_enough(torch.cat(ours), stepwise)
    ref.close_enough(within, stepwise[:24])  # within the original length: the same
    with pytest.raises(AssertionError, match="max abs diff"):
        ref.close_enough(ref.logits(seq)[24:], stepwise[24:])


def _model_config(config) -> ModelConfig:
    return ModelConfig.from_hf(config.to_dict() | {"architectures": [config.architectures[0]]})


def test_phi3_fused_checkpoint_tensors_are_cut_and_checked(tmp_path) -> None:
    model_dir = save_tiny_model(phi3_config(), tmp_path, with_tokenizer=False)
    weights = dict(iter_safetensors(model_dir))
    assert "model.layers.0.self_attn.qkv_proj.weight" in weights
    cfg = ModelConfig.from_hf(json.loads((model_dir / "config.json").read_text()))
    Phi3ForCausalLM(cfg).load_weights(weights.items())
    bad = weights | {"model.layers.1.mlp.gate_up_proj.weight": torch.zeros(100, 64)}
    with pytest.raises(
        ValueError, match="'model.layers.1.mlp.gate_up_proj.weight' has 100 rows; the config needs 256"
    ):
        Phi3ForCausalLM(cfg).load_weights(bad.items())


def test_smollm3_refuses_sliding_windows() -> None:
    smol = _config("smollm3", architectures=["SmolLM3ForCausalLM"], use_sliding_window=True, sliding_window=8)
    with pytest.raises(ValueError, match="use_sliding_window is not supported"):
        SmolLM3ForCausalLM(_model_config(smol))
