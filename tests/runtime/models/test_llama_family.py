"""Our model code equals transformers on tiny random checkpoints: prefill, cached-prefix extend,
decode, and mixed batches, through the real KV pools and the torch attention backend."""

from __future__ import annotations

import pytest
import torch

from radixlm.runtime.models.architectures import get_model_class
from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.llama import LlamaForCausalLM
from radixlm.runtime.weights.checkpoint import iter_safetensors
from tests.helpers.model_helpers import (
    PagedSession,
    assert_logits_close,
    make_runner,
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


class Reference:
    """Our runner and the transformers model on the same tiny checkpoint."""

    def __init__(self, model_dir) -> None:
        from transformers import AutoModelForCausalLM

        self.runner = make_runner(model_dir)
        self.hf = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
        self.session = PagedSession(self.runner)

    @torch.no_grad()
    def logits(self, tokens: list[int]) -> torch.Tensor:
        return self.hf(torch.tensor([tokens])).logits[0]


@pytest.fixture(scope="module", params=list(CONFIGS))
def ref(request, tmp_path_factory) -> Reference:
    model_dir = save_tiny_model(CONFIGS[request.param](), tmp_path_factory.mktemp(request.param))
    return Reference(model_dir)


def _tokens(n: int, seed: int) -> list[int]:
    return torch.randint(3, 300, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def test_prefill_logits_match_transformers(ref: Reference) -> None:
    seq = _tokens(23, 0)
    row = ref.session.open()
    ours = ref.session.extend([row], [seq], all_logits=True)[0]
    assert_logits_close(ours, ref.logits(seq))
    ref.session.close(row)


def test_extend_on_cached_prefix_matches(ref: Reference) -> None:
    seq = _tokens(30, 1)
    full = ref.logits(seq)
    s = ref.session
    row = s.open()
    s.extend([row], [seq[:10]])
    assert_logits_close(s.extend([row], [seq[10:17]], all_logits=True)[0], full[10:17])
    # A second request reusing the first request's cached KV for its first 6 tokens.
    other = s.share_prefix(row, 6)
    assert_logits_close(s.extend([other], [seq[6:30]], all_logits=True)[0], full[6:30])
    s.close(other)
    s.close(row)


def test_decode_steps_match(ref: Reference) -> None:
    seq = _tokens(12, 2)
    full = ref.logits(seq)
    s = ref.session
    row = s.open()
    assert_logits_close(s.extend([row], [seq[:5]])[0], full[4])
    for i in range(5, 12):
        assert_logits_close(s.decode([row], [seq[i]])[0], full[i])
    s.close(row)


def test_batch_of_different_lengths_extend_then_decode(ref: Reference) -> None:
    seqs = [_tokens(n, 10 + n) for n in (1, 7, 13, 40)]
    fulls = [ref.logits(seq) for seq in seqs]
    s = ref.session
    rows = [s.open() for _ in seqs]
    # Two requests already hold a cached prefix; all four extend together in one batch.
    s.extend([rows[2], rows[3]], [seqs[2][:4], seqs[3][:20]])
    prefix = [0, 0, 4, 20]
    ends = [len(seq) - 1 for seq in seqs]
    outs = s.extend(
        rows, [seq[p:e] if e > p else seq[:1] for seq, p, e in zip(seqs, prefix, ends)], all_logits=True
    )
    for full, p, e, out in zip(fulls, prefix, ends, outs):
        if e > p:
            assert_logits_close(out, full[p:e])
    # The 1-token request was fully prefilled above; the others decode their last token together.
    dec_rows, dec_tokens, dec_refs = rows[1:], [seq[-1] for seq in seqs[1:]], [f[-1] for f in fulls[1:]]
    assert_logits_close(s.decode(dec_rows, dec_tokens), torch.stack(dec_refs))
    for row in rows:
        s.close(row)


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
