"""Gemma 2, Gemma 3 (text) and the sliding windows of Mistral and Qwen2 equal transformers on tiny
random checkpoints: prefill, cached-prefix extend, decode past the window, mixed batches, and greedy
generation through an Engine (chunked prefill, radix reuse, a small pool).

Windows of 8 keys with sequences of 12-55 tokens make every sliding layer drop keys; Gemma 2's caps
(attention 1.0, logits 3.0) are small enough that tanh bends the random model's scores."""

from __future__ import annotations

import json

import pytest
import torch

from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.gemma import GemmaForCausalLM
from radixlm.runtime.models.sliding_window import layer_windows
from tests.helpers.model_conformance import Reference, check_all_logits, check_engine_greedy
from tests.helpers.model_helpers import save_tiny_model, tiny_kwargs, tiny_qwen2_config

WINDOW = 8
# the shared tiny shape with head_dim 16 and a window of 8; each config sets its own depth and tying
SMALL = {
    k: v
    for k, v in tiny_kwargs(head_dim=16, sliding_window=WINDOW).items()
    if k not in ("num_hidden_layers", "tie_word_embeddings")
}


def tiny_gemma2_config():
    """4 layers alternating sliding (0, 2) and global (1, 3); soft-capped scores and logits."""
    from transformers import Gemma2Config

    return Gemma2Config(
        **SMALL,
        num_hidden_layers=4,
        query_pre_attn_scalar=24,
        attn_logit_softcapping=1.0,
        final_logit_softcapping=3.0,
        hidden_activation="gelu_pytorch_tanh",
    )


def tiny_gemma3_config():
    """4 layers (sliding, sliding, global, sliding), q/k norms, local rope base 1e4 and a global one
    of 1e6 with linear scaling, untied LM head."""
    from transformers import Gemma3TextConfig

    return Gemma3TextConfig(
        **SMALL,
        num_hidden_layers=4,
        layer_types=["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"],
        query_pre_attn_scalar=32,
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "linear", "rope_theta": 1000000.0, "factor": 4.0},
        },
        tie_word_embeddings=False,
    )


def tiny_mistral_config():
    from transformers import MistralConfig

    return MistralConfig(**SMALL, num_hidden_layers=2)


def tiny_qwen2_window_config():
    """Layer 0 global, layer 1 sliding (``max_window_layers=1``)."""
    return tiny_qwen2_config(use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1)


CONFIGS = {
    "gemma2": tiny_gemma2_config,
    "gemma3": tiny_gemma3_config,
    "mistral-window": tiny_mistral_config,
    "qwen2-window": tiny_qwen2_window_config,
}


@pytest.fixture(scope="module", params=list(CONFIGS))
def ref(request, tmp_path_factory) -> Reference:
    model_dir = save_tiny_model(CONFIGS[request.param](), tmp_path_factory.mktemp(request.param))
    return Reference(model_dir)


def test_logits_match_transformers(ref: Reference) -> None:
    check_all_logits(ref)


def test_decode_far_past_the_window(ref: Reference) -> None:
    from tests.helpers.model_conformance import check_decode

    check_decode(ref, length=5 * WINDOW)


def test_engine_greedy_matches_transformers(ref: Reference) -> None:
    check_engine_greedy(ref.model_dir)


ARCHITECTURES = {
    "gemma2": "Gemma2ForCausalLM",
    "gemma3": "Gemma3ForCausalLM",
    "mistral-window": "MistralForCausalLM",
    "qwen2-window": "Qwen2ForCausalLM",
}


def _hf(name: str) -> dict:
    """The config.json ``save_pretrained`` writes (it adds ``architectures`` on saving)."""
    return {**json.loads(CONFIGS[name]().to_json_string()), "architectures": [ARCHITECTURES[name]]}


def test_layer_windows_follow_transformers() -> None:
    assert layer_windows(_hf("gemma2"), 4) == [WINDOW, None, WINDOW, None]
    assert layer_windows(_hf("gemma3"), 4) == [WINDOW, WINDOW, None, WINDOW]
    assert layer_windows(_hf("mistral-window"), 2) == [WINDOW, WINDOW]
    assert layer_windows(_hf("qwen2-window"), 2) == [None, WINDOW]
    plain_qwen2 = {**json.loads(tiny_qwen2_config().to_json_string()), "architectures": ["Qwen2ForCausalLM"]}
    assert layer_windows(plain_qwen2, 2) == [None, None]
    # configs without layer_types: each family's default pattern
    old_gemma3 = {"architectures": ["Gemma3ForCausalLM"], "sliding_window": 4, "sliding_window_pattern": 3}
    assert layer_windows(old_gemma3, 6) == [4, 4, None, 4, 4, None]
    old_mistral = {"architectures": ["MistralForCausalLM"], "sliding_window": 16}
    assert layer_windows(old_mistral, 2) == [16, 16]
    assert layer_windows({"architectures": ["MistralForCausalLM"], "sliding_window": None}, 2) == [None, None]
    with pytest.raises(ValueError, match="layer_types must name 2 layers"):
        layer_windows({**old_gemma3, "layer_types": ["sliding_attention"]}, 2)
    with pytest.raises(ValueError, match="sliding_window must be a positive"):
        layer_windows({**old_mistral, "sliding_window": 0}, 2)


def test_gemma_rejects_unknown_activation() -> None:
    cfg = ModelConfig.from_hf({**_hf("gemma2"), "hidden_activation": "relu"})
    with pytest.raises(ValueError, match="unsupported hidden_activation 'relu'"):
        GemmaForCausalLM(cfg)


def test_gemma3_rope_per_layer_kind() -> None:
    model = GemmaForCausalLM(ModelConfig.from_hf(_hf("gemma3")), max_positions=64)
    local, full = model.model.rotary_emb_local.cos_sin_cache, model.model.rotary_emb.cos_sin_cache
    assert not torch.equal(local, full)
    gemma2 = GemmaForCausalLM(ModelConfig.from_hf(_hf("gemma2")), max_positions=64)
    assert gemma2.model.rotary_emb_local is gemma2.model.rotary_emb


def test_cascade_steps_leave_window_layers_exact(ref: Reference, monkeypatch) -> None:
    """Requests sharing a cached prefix take the torch backend's cascade (read the prefix once) in
    full-attention layers; the windowed and capped layers must bypass it, in extend and in decode."""
    from radixlm.runtime.attention import torch_backend
    from tests.helpers.model_conformance import tokens

    monkeypatch.setattr(ref.runner.attn_backend, "min_shared_prefix", 1)
    monkeypatch.setattr(torch_backend, "MIN_SHARED_READS_IN_PLACE", 0)
    common = tokens(14, 70)
    seqs = [common + tokens(6 + 4 * i, 80 + i) for i in range(3)]
    fulls = [ref.logits(seq) for seq in seqs]
    s = ref.session
    first = s.open()
    s.extend([first], [seqs[0][:14]])
    rows = [first] + [s.share_prefix(first, 14) for _ in seqs[1:]]
    outs = s.extend(rows, [seq[14:-3] for seq in seqs], all_logits=True)
    for out, full in zip(outs, fulls):
        ref.close_enough(out, full[14:-3])
    for step in (3, 2, 1):
        logits = s.decode(rows, [seq[-step] for seq in seqs])
        ref.close_enough(logits, torch.stack([full[-step] for full in fulls]))
    for row in reversed(rows):
        s.close(row)


def test_gemma3_reads_the_older_rope_layout() -> None:
    """Hub configs written before transformers 5: ``rope_theta``/``rope_scaling`` for the global
    layers, ``rope_local_base_freq`` for the sliding ones (transformers 5 converts them the same)."""
    from radixlm.runtime.models.gemma import _rope_per_kind
    from radixlm.runtime.models.sliding_window import FULL, SLIDING

    old = {k: v for k, v in _hf("gemma3").items() if k not in ("rope_parameters", "layer_types")}
    linear = {"rope_type": "linear", "factor": 8.0}
    cfg = ModelConfig.from_hf({**old, "rope_theta": 1e6, "rope_local_base_freq": 1e4, "rope_scaling": linear})
    assert _rope_per_kind(cfg) == {FULL: (1e6, linear), SLIDING: (1e4, None)}


def test_deterministic_mode_windows(tmp_path) -> None:
    """``--enable-deterministic-inference`` attends per position; windows and caps hold there too."""
    model_dir = save_tiny_model(tiny_gemma2_config(), tmp_path, seed=3)
    check_engine_greedy(model_dir, max_new_tokens=12, enable_deterministic_inference=True)


def test_mixed_step_decode_tail(ref: Reference) -> None:
    """A prompt chunk with two decodes riding along (the torch backend's planned decode tail) past
    the window."""
    from tests.helpers.model_conformance import tokens

    seqs = [tokens(n, 90 + n) for n in (16, 13, 21)]
    fulls = [ref.logits(seq) for seq in seqs]
    s = ref.session
    rows = [s.open() for _ in seqs]
    s.extend(rows[1:], [seqs[1][:-1], seqs[2][:-1]])
    outs = s.extend(rows, [seqs[0], seqs[1][-1:], seqs[2][-1:]], all_logits=True)
    ref.close_enough(outs[0], fulls[0])
    ref.close_enough(torch.cat(outs[1:]), torch.stack([fulls[1][-1], fulls[2][-1]]))
    for row in rows:
        s.close(row)
