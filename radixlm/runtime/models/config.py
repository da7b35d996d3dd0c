"""The architecture hyperparameters our model code reads, parsed robustly from a config.json dict."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def language_fields(cfg: dict[str, Any]) -> dict[str, Any]:
    """The language model's fields of a ``config.json``: a vision-language model's ``text_config``
    (with the top level's ``architectures``), else the config itself."""
    if isinstance(cfg.get("text_config"), dict) and "num_attention_heads" not in cfg:
        return {**cfg["text_config"], "architectures": cfg.get("architectures") or []}
    return cfg


@dataclass(frozen=True)
class ModelConfig:
    """Decoder-only transformer shape. Built with ``from_hf`` from a Hugging Face config dict."""

    architecture: str
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict[str, Any] | None
    tie_word_embeddings: bool
    qkv_bias: bool  # biases on the q/k/v projections
    o_bias: bool  # a bias on the attention output projection
    qk_norm: bool  # a per-head RMSNorm on q and k before rotary (Qwen3)
    mlp_bias: bool
    hidden_act: str
    # the whole config.json dict: an architecture's own fields are read from it by its model file
    hf: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_hf(cls, cfg: dict[str, Any]) -> ModelConfig:
        """Read both transformers 4 (``rope_theta``/``rope_scaling`` at top level) and transformers 5
        (``rope_parameters``) layouts."""
        archs = cfg.get("architectures") or []
        if not archs:
            raise ValueError("config.json has no 'architectures' entry")
        whole = cfg
        cfg = language_fields(cfg)
        num_heads = int(cfg["num_attention_heads"])
        hidden = int(cfg["hidden_size"])
        theta, scaling = _rope(cfg, archs[0])
        qkv_bias, o_bias, qk_norm = _attention_flags(archs[0], bool(cfg.get("attention_bias", False)))
        return cls(
            architecture=archs[0],
            hidden_size=hidden,
            intermediate_size=int(cfg["intermediate_size"]),
            num_layers=int(cfg["num_hidden_layers"]),
            num_heads=num_heads,
            num_kv_heads=int(cfg.get("num_key_value_heads") or num_heads),
            head_dim=int(cfg.get("head_dim") or hidden // num_heads),
            vocab_size=int(cfg["vocab_size"]),
            max_position_embeddings=int(cfg.get("max_position_embeddings") or 2048),
            rms_norm_eps=float(cfg.get("rms_norm_eps") or 1e-6),
            rope_theta=theta,
            rope_scaling=scaling,
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            qkv_bias=qkv_bias,
            o_bias=o_bias,
            qk_norm=qk_norm,
            mlp_bias=bool(cfg.get("mlp_bias", False)),
            hidden_act=str(cfg.get("hidden_act") or cfg.get("hidden_activation") or "silu"),
            hf=dict(whole),
        )


def _attention_flags(architecture: str, attention_bias: bool) -> tuple[bool, bool, bool]:
    """(q/k/v bias, o_proj bias, q/k norm): Qwen2 always has q/k/v biases and no o_proj bias; Qwen3
    adds the q/k norm; the others follow the config's ``attention_bias``. A family's bare decoder
    (``Qwen3Model``) and classifier (``Qwen3ForSequenceClassification``) are built like its causal LM."""
    for suffix in ("ForSequenceClassification", "Model"):
        if architecture.endswith(suffix):
            architecture = architecture.removesuffix(suffix) + "ForCausalLM"
    if architecture == "Qwen2ForCausalLM":
        return True, False, False
    return attention_bias, attention_bias, architecture == "Qwen3ForCausalLM"


def _rope(cfg: dict[str, Any], architecture: str) -> tuple[float, dict[str, Any] | None]:
    """(rope theta, the normalized scaling dict, or None for the plain rope over the whole head).

    The dict carries what ``layers/rope_scaling.py`` reads, filled as transformers fills it: the
    ``partial_rotary_factor`` (the rope dict's, else the top level's), ``original_max_position_embeddings``
    for llama3/yarn/longrope (the top level's first, as Phi-3 keeps it there, else the dict's, else
    ``max_position_embeddings``), yarn's and longrope's ``factor`` when absent (max / original), and
    dynamic NTK's ``max_position_embeddings``. Phi-3's legacy ``su``/``yarn`` names mean longrope.
    """
    dicts = [d for d in (cfg.get("rope_parameters"), cfg.get("rope_scaling")) if isinstance(d, dict)]
    theta = cfg.get("rope_theta") or next((d["rope_theta"] for d in dicts if d.get("rope_theta")), 10000.0)
    found = next((d for d in dicts if (d.get("rope_type") or d.get("type")) not in (None, "default")), None)
    scaling = dict(found or {})
    rope_type = scaling.get("rope_type") or scaling.get("type") or "default"
    if rope_type == "su" or (architecture == "Phi3ForCausalLM" and rope_type == "yarn"):
        rope_type = "longrope"
    partial = next((d["partial_rotary_factor"] for d in dicts if d.get("partial_rotary_factor")), None)
    partial = float(partial or cfg.get("partial_rotary_factor") or 1.0)
    if rope_type == "default" and partial == 1.0:
        return float(theta), None
    scaling["rope_type"] = rope_type
    if partial != 1.0:
        scaling["partial_rotary_factor"] = partial
    max_positions = int(cfg.get("max_position_embeddings") or 2048)
    if rope_type in ("llama3", "yarn", "longrope"):
        original = cfg.get("original_max_position_embeddings") or scaling.get(
            "original_max_position_embeddings"
        )
        scaling["original_max_position_embeddings"] = int(original or max_positions)
    if rope_type in ("yarn", "longrope") and scaling.get("factor") is None:
        scaling["factor"] = max_positions / scaling["original_max_position_embeddings"]
    if rope_type == "dynamic":
        scaling["max_position_embeddings"] = max_positions
    return float(theta), scaling
