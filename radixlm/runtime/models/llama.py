"""The Llama family (Llama 2/3, SmolLM2, TinyLlama, Mistral), mirroring Hugging Face's LlamaForCausalLM.

q/k/v and gate/up are fused into one matmul each; ``load_weights`` takes the checkpoint's separate
tensors. Subclasses switch on q/k/v biases (Qwen2) and per-head q/k norms (Qwen3).
Mistral's sliding window is not applied (exact for contexts within the window).
"""
from __future__ import annotations

from typing import Iterable

import torch
from torch import nn

from radixlm.runtime.forward_batch import ForwardBatch
from radixlm.runtime.layers.activation import silu_and_mul
from radixlm.runtime.layers.linear import Embedding, Linear, MergedLinear, copy_checked
from radixlm.runtime.layers.radix_attention import RadixAttention
from radixlm.runtime.layers.rmsnorm import RMSNorm
from radixlm.runtime.layers.rotary import RotaryEmbedding, apply_rotary
from radixlm.runtime.models.config import ModelConfig

# (fused parameter, checkpoint projection, shard index)
_STACKED = (
    ("qkv_proj", "q_proj", 0),
    ("qkv_proj", "k_proj", 1),
    ("qkv_proj", "v_proj", 2),
    ("gate_up_proj", "gate_proj", 0),
    ("gate_up_proj", "up_proj", 1),
)


class LlamaAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_id: int, qkv_bias: bool, o_bias: bool,
                 qk_norm: bool) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        q_size, kv_size = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        self.split_sizes = [q_size, kv_size, kv_size]
        self.qkv_proj = MergedLinear(cfg.hidden_size, self.split_sizes, bias=qkv_bias)
        self.o_proj = Linear(q_size, cfg.hidden_size, bias=o_bias)
        self.q_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps) if qk_norm else None
        self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps) if qk_norm else None
        self.attn = RadixAttention(self.num_heads, self.num_kv_heads, self.head_dim, layer_id)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                fb: ForwardBatch) -> torch.Tensor:
        q, k, v = self.qkv_proj(x).split(self.split_sizes, dim=-1)
        q = q.view(-1, self.num_heads, self.head_dim)
        k = k.view(-1, self.num_kv_heads, self.head_dim)
        v = v.view(-1, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        return self.o_proj(self.attn(q, k, v, fb))


class LlamaMLP(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        inter = cfg.intermediate_size
        self.gate_up_proj = MergedLinear(cfg.hidden_size, [inter, inter], bias=cfg.mlp_bias)
        self.down_proj = Linear(inter, cfg.hidden_size, bias=cfg.mlp_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(silu_and_mul(self.gate_up_proj(x)))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_id: int, qkv_bias: bool, o_bias: bool,
                 qk_norm: bool) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = LlamaAttention(cfg, layer_id, qkv_bias, o_bias, qk_norm)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = LlamaMLP(cfg)

    def forward(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                fb: ForwardBatch) -> torch.Tensor:
        h = h + self.self_attn(self.input_layernorm(h), cos, sin, fb)
        return h + self.mlp(self.post_attention_layernorm(h))


class LlamaModel(nn.Module):
    def __init__(self, cfg: ModelConfig, qkv_bias: bool, o_bias: bool, qk_norm: bool,
                 max_positions: int) -> None:
        super().__init__()
        self.embed_tokens = Embedding(cfg.vocab_size, cfg.hidden_size)
        self.rotary_emb = RotaryEmbedding(cfg.head_dim, max_positions, cfg.rope_theta, cfg.rope_scaling)
        self.layers = nn.ModuleList(
            LlamaDecoderLayer(cfg, i, qkv_bias, o_bias, qk_norm) for i in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        """Hidden states ``[T, hidden]`` of all new tokens, before the final norm."""
        h = self.embed_tokens(fb.input_ids)
        cos, sin = self.rotary_emb.cos_sin(fb.positions, h.dtype)
        for layer in self.layers:
            h = layer(h, cos, sin, fb)
        return h


class LlamaForCausalLM(nn.Module):
    """``forward(fb)`` -> float32 logits ``[len(fb.logits_indices), vocab_size]``."""

    def __init__(self, cfg: ModelConfig, max_positions: int | None = None) -> None:
        super().__init__()
        self.config = cfg
        qkv_bias, o_bias, qk_norm = self.attention_options(cfg)
        self.model = LlamaModel(cfg, qkv_bias, o_bias, qk_norm,
                                max_positions or cfg.max_position_embeddings)
        self.lm_head = self.model.embed_tokens if cfg.tie_word_embeddings else \
            Linear(cfg.hidden_size, cfg.vocab_size)

    @classmethod
    def attention_options(cls, cfg: ModelConfig) -> tuple[bool, bool, bool]:
        """(q/k/v bias, o_proj bias, per-head q/k RMSNorm) for this architecture."""
        return cfg.attention_bias, cfg.attention_bias, False

    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        h = self.model(fb)[fb.logits_indices]
        return torch.nn.functional.linear(self.model.norm(h), self.lm_head.weight).float()

    @torch.no_grad()
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy Hugging Face-named tensors into the parameters; raise if any parameter stays unset."""
        params = dict(self.named_parameters())
        modules = dict(self.named_modules())
        expected = set()
        for name in params:
            module = modules[name.rsplit(".", 1)[0]]
            if isinstance(module, MergedLinear):
                expected |= {f"{name}[{i}]" for i in range(len(module.out_sizes))}
            else:
                expected.add(name)
        loaded = set()
        for name, tensor in weights:
            if "rotary_emb." in name or (name == "lm_head.weight" and self.config.tie_word_embeddings):
                continue
            target, shard = _stacked_key(name) or (name, None)
            if target not in params:
                raise ValueError(f"unexpected checkpoint tensor {name!r}")
            if shard is None:
                copy_checked(params[target].data, tensor, name)
                loaded.add(target)
            else:
                module_name, param_name = target.rsplit(".", 1)
                modules[module_name].load_shard(param_name, shard, tensor)
                loaded.add(f"{target}[{shard}]")
        missing = sorted(expected - loaded)
        if missing:
            raise ValueError(f"checkpoint is missing weights: {', '.join(missing[:8])}"
                             f"{' ...' if len(missing) > 8 else ''}")


def _stacked_key(name: str) -> tuple[str, int] | None:
    """``...q_proj.weight`` -> (``...qkv_proj.weight``, 0), or None for unfused tensors."""
    parts = name.split(".")
    for fused, proj, shard in _STACKED:
        if len(parts) >= 2 and parts[-2] == proj:
            return ".".join([*parts[:-2], fused, parts[-1]]), shard
    return None
