"""Every rope variant's frequencies and cos/sin rows equal transformers' (``ROPE_INIT_FUNCTIONS`` and the
models' rotary modules), reading the config through ``ModelConfig`` from either transformers layout;
partial rotary turns only the first dims; ``freq_factors`` is llama.cpp's division by ``rope_freqs``."""

from __future__ import annotations

import pytest
import torch

from radixlm.runtime.layers.rope_scaling import rope_attention_factor, rope_cos_sin_table
from radixlm.runtime.layers.rotary import RotaryEmbedding, rope_inv_freq
from radixlm.runtime.models.config import ModelConfig

SMALL = dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=1, intermediate_size=64, vocab_size=32)
SHORT = [1.0, 1.1, 1.3, 1.6, 2.0, 2.5, 3.0, 3.5]
LONG = [1.0, 1.5, 2.5, 4.0, 6.0, 9.0, 13.0, 20.0]
CASES = {
    "linear": ("llama", {"rope_type": "linear", "factor": 3.0}, {}),
    "llama3.2": (
        "llama",
        {
            "rope_type": "llama3",
            "factor": 32.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
            "rope_theta": 500000.0,
        },
        {},
    ),
    "yarn": ("qwen3", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}, {}),
    "yarn-beta-no-truncate": (
        "qwen2",
        {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 64, "beta_fast": 16.0}
        | {"beta_slow": 2.0, "truncate": False, "rope_theta": 1e6},
        {},
    ),
    "yarn-mscale": (
        "llama",
        {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 64}
        | {"mscale": 0.707, "mscale_all_dim": 1.0},
        {},
    ),
    "yarn-attention-factor": (
        "llama",
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "attention_factor": 1.5},
        {},
    ),
    "longrope": (
        "phi3",
        {"rope_type": "longrope", "short_factor": SHORT, "long_factor": LONG},
        {"original_max_position_embeddings": 48, "max_position_embeddings": 512},
    ),
    "longrope-partial-tf4": (
        "phi3",
        {"type": "longrope", "short_factor": SHORT[:6], "long_factor": LONG[:6]},
        {
            "original_max_position_embeddings": 48,
            "max_position_embeddings": 512,
            "partial_rotary_factor": 0.75,
        },
    ),
    "dynamic": ("llama", {"rope_type": "dynamic", "factor": 2.0}, {"max_position_embeddings": 40}),
    "partial-default": ("phi3", {"rope_type": "default"}, {"partial_rotary_factor": 0.5}),
}


def _hf_config(model_type: str, rope: dict, extra: dict):
    from transformers import AutoConfig

    kwargs = dict(SMALL, max_position_embeddings=128) | extra
    rope = dict(rope)
    if "type" in rope:  # a transformers 4 config.json: rope_scaling and a top-level theta
        kwargs |= {"rope_scaling": rope, "rope_theta": 10000.0}
    else:
        kwargs["rope_parameters"] = {"rope_theta": 10000.0} | rope
    return AutoConfig.for_model(model_type, **kwargs)


def _ours(config) -> ModelConfig:
    return ModelConfig.from_hf(
        {**config.to_dict(), "architectures": [f"{type(config).__name__[:-6]}ForCausalLM"]}
    )


def _hf_rotary(config):
    """The model's own rotary module (its default-rope function included)."""
    import importlib

    name = type(config).__name__[: -len("Config")]
    module = importlib.import_module(f"transformers.models.{config.model_type}.modeling_{config.model_type}")
    return getattr(module, f"{name}RotaryEmbedding")(config)


@pytest.mark.parametrize("case", list(CASES))
def test_inv_freq_and_attention_factor_match_transformers(case: str) -> None:
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = _hf_config(*CASES[case])
    ours = _ours(config)
    rope_type = config.rope_parameters["rope_type"]
    if rope_type == "default":
        ref, ref_factor = _hf_rotary(config).compute_default_rope_parameters(config)
    else:
        ref, ref_factor = ROPE_INIT_FUNCTIONS[rope_type](config, "cpu")
    inv_freq = rope_inv_freq(ours.head_dim, ours.rope_theta, ours.rope_scaling)
    torch.testing.assert_close(inv_freq, ref.float(), rtol=1e-6, atol=0)
    assert rope_attention_factor(ours.rope_scaling) == pytest.approx(ref_factor, rel=1e-12)


@pytest.mark.parametrize("case", list(CASES))
def test_cos_sin_rows_match_transformers_forward_ending_at_each_position(case: str) -> None:
    """Row ``p`` equals the cos/sin transformers' rotary module gives position ``p`` in a forward whose
    last position is ``p`` (one token at a time: LongRoPE turns long and dynamic NTK stretches beyond
    the original length), attention factor included."""
    config = _hf_config(*CASES[case])
    ours = _ours(config)
    table = rope_cos_sin_table(ours.head_dim, ours.rope_theta, ours.rope_scaling, 100)
    hf_rotary = _hf_rotary(config)
    half = table.shape[-1] // 2
    x = torch.zeros(1, 1, 1)
    for p in [0, 1, 17, 39, 40, 47, 48, 63, 64, 99]:
        cos, sin = hf_rotary(x, torch.tensor([[p]]))
        torch.testing.assert_close(table[p, :half], cos[0, 0, :half], rtol=2e-6, atol=2e-6)
        torch.testing.assert_close(table[p, half:], sin[0, 0, :half], rtol=2e-6, atol=2e-6)


def test_longrope_switches_to_long_factors_at_the_original_length() -> None:
    ours = _ours(_hf_config(*CASES["longrope"]))
    table = rope_cos_sin_table(ours.head_dim, ours.rope_theta, ours.rope_scaling, 100)
    scale = rope_attention_factor(ours.rope_scaling)
    assert scale == pytest.approx(
        (1 + torch.log(torch.tensor(512 / 48)) / torch.log(torch.tensor(48.0))).sqrt().item()
    )
    short = 1.0 / (torch.tensor(SHORT) * 10000.0 ** (torch.arange(0, 16, 2).float() / 16))
    long = short * torch.tensor(SHORT) / torch.tensor(LONG)
    torch.testing.assert_close(table[47, :8], (47 * short).cos() * scale)
    torch.testing.assert_close(table[48, :8], (48 * long).cos() * scale)


def test_freq_factors_divide_the_inverse_frequencies_as_llama_cpp() -> None:
    factors = [1.0, 1.0, 2.0, 4.0, 8.0, 8.0, 16.0, 32.0]
    scaling = {"rope_type": "freq_factors", "rope_theta": 500000.0, "factors": factors}
    plain = rope_inv_freq(16, 500000.0, None)
    torch.testing.assert_close(rope_inv_freq(16, 500000.0, scaling), plain / torch.tensor(factors))
    cfg = ModelConfig.from_hf(dict(SMALL, architectures=["LlamaForCausalLM"], rope_parameters=scaling))
    assert cfg.rope_theta == 500000.0 and cfg.rope_scaling is not None
    assert cfg.rope_scaling["factors"] == factors
    with pytest.raises(ValueError, match="'factors' has 3 entries; the rotary dim 16 needs 8"):
        rope_inv_freq(16, 500000.0, scaling | {"factors": [1.0, 2.0, 3.0]})


def test_phi3_legacy_su_name_means_longrope() -> None:
    raw = dict(SMALL, architectures=["Phi3ForCausalLM"], rope_theta=1e4, max_position_embeddings=512)
    raw |= {"original_max_position_embeddings": 48, "rope_scaling": {"type": "su", "short_factor": SHORT}}
    scaling = ModelConfig.from_hf(raw).rope_scaling
    assert scaling is not None
    assert (scaling["rope_type"], scaling["original_max_position_embeddings"], scaling["factor"]) == (
        "longrope",
        48,
        512 / 48,
    )


def test_unknown_or_incomplete_rope_scaling_is_refused() -> None:
    with pytest.raises(ValueError, match="unsupported rope scaling type 'mrope'"):
        rope_inv_freq(16, 1e4, {"rope_type": "mrope"})
    with pytest.raises(ValueError, match="'yarn' needs 'original_max_position_embeddings'"):
        rope_inv_freq(16, 1e4, {"rope_type": "yarn", "factor": 2.0})


@pytest.mark.parametrize("kernel", [True, False], ids=["cpp-kernel", "torch-ops"])
def test_partial_rotary_turns_only_the_first_dims(kernel: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Phi-4-mini's layout: the first 12 of 16 dims rotate (rotate-half within them), 4 pass through;
    the C++ kernel and the torch ops both take the strided views of the fused projection."""
    from radixlm.kernels.cpu import build

    if kernel and build.load_decode_kernels() is None:
        pytest.skip("the CPU decode kernels cannot be built here")
    if not kernel:
        monkeypatch.setattr(build.DECODE_KERNELS, "get", lambda: None)
    rotary = RotaryEmbedding(16, 64, 10000.0, {"rope_type": "default", "partial_rotary_factor": 0.75})
    assert rotary.rotary_dim == 12
    qkv = torch.randn(5, 6 * 16)
    q, k = qkv[:, : 4 * 16].view(5, 4, 16), qkv[:, 4 * 16 :].view(5, 2, 16)
    positions = torch.tensor([0, 3, 63, 9, 9])
    out_q, out_k = rotary(positions, q, k)
    inv_freq = rope_inv_freq(12, 10000.0, None)
    angles = torch.outer(positions.float(), inv_freq)
    cos, sin = torch.cat([angles.cos()] * 2, -1)[:, None], torch.cat([angles.sin()] * 2, -1)[:, None]
    for x, out in ((q, out_q), (k, out_k)):
        rot = x[..., :12]
        turned = rot * cos + torch.cat([-rot[..., 6:], rot[..., :6]], -1) * sin
        torch.testing.assert_close(out[..., :12], turned, rtol=1e-6, atol=1e-6)
        assert torch.equal(out[..., 12:], x[..., 12:])
