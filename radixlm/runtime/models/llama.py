"""The Llama family (Llama 2/3, SmolLM2, TinyLlama, Mistral, Qwen2, Qwen3), mirroring Hugging Face's
LlamaForCausalLM.

q/k/v and gate/up are fused into one matmul each; ``load_weights`` takes the checkpoint's separate
tensors. ``ModelConfig`` flags switch on q/k/v and o_proj biases (Qwen2) and per-head q/k norms
(Qwen3). Sliding windows (Mistral's ``sliding_window``, Qwen2/3's ``use_sliding_window``) come from
``models/sliding_window.py``.

Other dense architectures are small subclasses (``phi3.py``, ``granite.py``, ``olmo2.py``,
``smollm3.py``, ``gemma.py``, the MoE families): the class attributes ``LlamaForCausalLM.model_cls``,
``LlamaModel.layer_cls`` and ``LlamaDecoderLayer.attention_cls``/``mlp_cls`` pick the parts,
``LlamaAttention.project_qkv``, ``LlamaAttention.use_rope`` and ``LlamaModel.embed`` are the hooks
they override.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from radixlm.kernels.activation import silu_and_mul
from radixlm.runtime.attention.radix_attention import RadixAttention
from radixlm.runtime.executor.forward_batch import ForwardBatch
from radixlm.runtime.layers.linear import Embedding, Linear, MergedLinear
from radixlm.runtime.layers.module import Module
from radixlm.runtime.layers.rmsnorm import RMSNorm
from radixlm.runtime.layers.rotary import RotaryEmbedding
from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.sliding_window import layer_windows
from radixlm.runtime.models.weight_loading import load_checkpoint


class LlamaAttention(Module):
    """q/k/v projection, optional q/k norms, rotary, paged attention, output projection.

    ``scaling`` (default ``head_dim ** -0.5``) and ``logit_softcap`` serve other families (Gemma);
    the layer's sliding window is read from the config (``layer_windows``)."""

    def __init__(
        self,
        cfg: ModelConfig,
        layer_id: int,
        scaling: float | None = None,
        logit_softcap: float | None = None,
    ) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        q_size, kv_size = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        self.split_sizes = [q_size, kv_size, kv_size]
        self.qkv_proj = MergedLinear(cfg.hidden_size, self.split_sizes, bias=cfg.qkv_bias)
        self.o_proj = Linear(q_size, cfg.hidden_size, bias=cfg.o_bias)
        self.q_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps) if cfg.qk_norm else None
        window = layer_windows(cfg.hf, cfg.num_layers)[layer_id]
        self.attn = RadixAttention(
            self.num_heads, self.num_kv_heads, self.head_dim, layer_id, scaling, window, logit_softcap
        )
        self.use_rope = True  # False: a layer without position embedding (SmolLM3's NoPE layers)

    def forward(self, x: torch.Tensor, rotary: RotaryEmbedding, fb: ForwardBatch) -> torch.Tensor:
        q, k, v = self.project_qkv(x)
        if self.use_rope:
            q, k = rotary(fb.positions, q, k)
        return self.o_proj(self.attn(q, k, v, fb))

    def project_qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``q`` ``[T, Hq, D]``, ``k`` and ``v`` ``[T, Hkv, D]`` before rotary (q/k normed if so)."""
        # one view as heads, split along them: the same strided views as splitting the rows and
        # viewing each part, in two ops instead of five
        hq, hkv = self.num_heads, self.num_kv_heads
        heads = self.qkv_proj(x).view(-1, hq + 2 * hkv, self.head_dim)
        q, k, v = heads.split_with_sizes((hq, hkv, hkv), dim=1)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        return q, k, v


class LlamaMLP(Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        if cfg.hidden_act != "silu":
            raise ValueError(f"unsupported hidden_act {cfg.hidden_act!r} for {cfg.architecture} (only silu)")
        inter = cfg.intermediate_size
        self.gate_up_proj = MergedLinear(cfg.hidden_size, [inter, inter], bias=cfg.mlp_bias)
        self.down_proj = Linear(inter, cfg.hidden_size, bias=cfg.mlp_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(silu_and_mul(self.gate_up_proj(x)))


class LlamaDecoderLayer(Module):
    """One block. The residual stream is passed along unadded: each norm adds its input to the
    residual first (``RMSNorm.add_and_norm``, one fused kernel on CUDA). A family with another
    attention or feed-forward sets ``attention_cls``/``mlp_cls``, or overrides ``build_attention``/
    ``build_mlp`` to choose per layer."""

    attention_cls: type[LlamaAttention] = LlamaAttention
    mlp_cls: type[LlamaMLP] = LlamaMLP

    def __init__(self, cfg: ModelConfig, layer_id: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = self.build_attention(cfg, layer_id)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = self.build_mlp(cfg, layer_id)

    def build_attention(self, cfg: ModelConfig, layer_id: int) -> Module:
        return self.attention_cls(cfg, layer_id)

    def build_mlp(self, cfg: ModelConfig, layer_id: int) -> Module:
        """The layer's feed-forward block (a family may choose per layer: MoE or dense)."""
        return self.mlp_cls(cfg)

    def forward(
        self, h: torch.Tensor, residual: torch.Tensor | None, rotary: RotaryEmbedding, fb: ForwardBatch
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(output, residual)``: the block's value is their sum."""
        if residual is None:
            x, residual = self.input_layernorm(h), h
        else:
            x, residual = self.input_layernorm.add_and_norm(h, residual)
        x, residual = self.post_attention_layernorm.add_and_norm(self.self_attn(x, rotary, fb), residual)
        return self.mlp(x), residual


class LlamaModel(Module):
    layer_cls: type[Module] = LlamaDecoderLayer  # forward(h, residual, rotary, fb) -> (out, residual)

    def __init__(self, cfg: ModelConfig, max_positions: int) -> None:
        super().__init__()
        self.embed_tokens = Embedding(cfg.vocab_size, cfg.hidden_size)
        self.rotary_emb = RotaryEmbedding(cfg.head_dim, max_positions, cfg.rope_theta, cfg.rope_scaling)
        self.layers = nn.ModuleList(self.layer_cls(cfg, i) for i in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The first layer's input ``[T, hidden]``."""
        return self.embed_tokens(input_ids)

    def forward(self, fb: ForwardBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """The last layer's ``(output, residual)`` ``[T, hidden]`` for all new tokens: their sum is
        the hidden state before the final norm (``norm`` is applied by the logits step)."""
        h = self.embed(fb.input_ids)
        residual = None
        for layer in self.layers:
            h, residual = layer(h, residual, self.rotary_emb, fb)
        assert residual is not None, "a model has at least one layer"
        return h, residual


class LlamaForCausalLM(Module):
    """``forward(fb)`` -> float32 logits ``[len(fb.logits_indices), vocab_size]``."""

    model_cls: type[LlamaModel] = LlamaModel
    supports_tensor_parallel = True  # shard_llama can split its heads and MLP across ranks

    def __init__(self, cfg: ModelConfig, max_positions: int | None = None) -> None:
        super().__init__()
        self.config = cfg
        self.model = self.model_cls(cfg, max_positions or cfg.max_position_embeddings)
        self.lm_head = (
            self.model.embed_tokens if cfg.tie_word_embeddings else Linear(cfg.hidden_size, cfg.vocab_size)
        )

    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        h, residual = self.model(fb)
        if fb.returns_all_rows(h.shape[0]):  # a decode step: no gather of every row
            return self.compute_logits(h, residual)
        return self.compute_logits(h[fb.logits_indices], residual[fb.logits_indices])

    def compute_logits(self, h: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """The logits step for the selected tokens: the last residual add and the final norm (one
        fused op), then the LM head; float32 ``[n, vocab_size]``."""
        x, _ = self.model.norm.add_and_norm(h, residual)
        return self.lm_head.project(x).float()

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy Hugging Face-named tensors into the parameters; raise if any parameter stays unset."""
        tied = self.config.tie_word_embeddings
        load_checkpoint(
            self, weights, skip=lambda name: "rotary_emb." in name or (tied and name == "lm_head.weight")
        )
