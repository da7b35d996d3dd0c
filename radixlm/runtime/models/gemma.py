"""Gemma 2 and Gemma 3 (text), mirroring transformers' Gemma2ForCausalLM and Gemma3ForCausalLM.

What differs from Llama (``llama.py``, whose attention this reuses):

- RMSNorm scales by ``1 + w``: the checkpoint's ``w`` is loaded as ``1 + w`` (computed in fp32, then
  stored in the model dtype), so the plain ``RMSNorm`` applies it;
- each block norms the attention and MLP outputs too (``post_attention_layernorm``,
  ``post_feedforward_layernorm``) before adding them to the residual;
- the MLP is GeGLU with tanh-approximated gelu (``hidden_activation``);
- the embedding is scaled by ``sqrt(hidden_size)``, rounded to the model dtype as transformers does;
- the attention scale is ``query_pre_attn_scalar ** -0.5``; Gemma 2 soft-caps the attention scores
  (``attn_logit_softcapping``) and the final logits (``final_logit_softcapping``);
- layers alternate sliding-window and global attention (``sliding_window.layer_types``);
- Gemma 3 norms q and k per head and gives sliding layers their own rope base
  (``rope_local_base_freq`` / ``rope_parameters["sliding_attention"]``) and global layers theirs,
  with its scaling.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.executor.forward_batch import ForwardBatch
from radixlm.runtime.layers.linear import Embedding, Linear, MergedLinear
from radixlm.runtime.layers.module import Module
from radixlm.runtime.layers.rmsnorm import RMSNorm
from radixlm.runtime.layers.rotary import RotaryEmbedding
from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.llama import LlamaAttention, LlamaForCausalLM
from radixlm.runtime.models.sliding_window import FULL, SLIDING, layer_types
from radixlm.runtime.models.weight_loading import load_checkpoint
from radixlm.runtime.weights.source import StoredTensor, as_float

GELU_APPROXIMATION = {"gelu_pytorch_tanh": "tanh", "gelu_tanh": "tanh", "gelu": "none"}


class GemmaMLP(Module):
    """``down(gelu(gate(x)) * up(x))``, gate and up fused into one matmul."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        act = str(cfg.hf.get("hidden_activation") or cfg.hidden_act)
        if act not in GELU_APPROXIMATION:
            raise ValueError(
                f"unsupported hidden_activation {act!r} for {cfg.architecture} "
                f"(supported: {', '.join(GELU_APPROXIMATION)})"
            )
        self.approximate = GELU_APPROXIMATION[act]
        inter = cfg.intermediate_size
        self.gate_up_proj = MergedLinear(cfg.hidden_size, [inter, inter], bias=False)
        self.down_proj = Linear(inter, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.gelu(gate, approximate=self.approximate) * up)


class GemmaDecoderLayer(Module):
    """One block; like ``LlamaDecoderLayer`` it passes the residual stream along unadded."""

    def __init__(self, cfg: ModelConfig, layer_id: int, sliding: bool) -> None:
        super().__init__()
        self.sliding = sliding
        hf, eps = cfg.hf, cfg.rms_norm_eps
        scaling = float(hf.get("query_pre_attn_scalar") or cfg.head_dim) ** -0.5
        softcap = hf.get("attn_logit_softcapping")
        self.input_layernorm = RMSNorm(cfg.hidden_size, eps)
        self.self_attn = LlamaAttention(cfg, layer_id, scaling, None if softcap is None else float(softcap))
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, eps)
        self.pre_feedforward_layernorm = RMSNorm(cfg.hidden_size, eps)
        self.mlp = GemmaMLP(cfg)
        self.post_feedforward_layernorm = RMSNorm(cfg.hidden_size, eps)

    def forward(
        self, h: torch.Tensor, residual: torch.Tensor | None, rotary: RotaryEmbedding, fb: ForwardBatch
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(output, residual)``: the block's value is their sum."""
        if residual is None:
            x, residual = self.input_layernorm(h), h
        else:
            x, residual = self.input_layernorm.add_and_norm(h, residual)
        x = self.post_attention_layernorm(self.self_attn(x, rotary, fb))
        x, residual = self.pre_feedforward_layernorm.add_and_norm(x, residual)
        return self.post_feedforward_layernorm(self.mlp(x)), residual


class GemmaModel(Module):
    def __init__(self, cfg: ModelConfig, max_positions: int) -> None:
        super().__init__()
        kinds = layer_types(cfg.hf, cfg.num_layers)
        ropes = _rope_per_kind(cfg)
        self.embed_tokens = Embedding(cfg.vocab_size, cfg.hidden_size)
        self.embed_scale = math.sqrt(cfg.hidden_size)
        self.rotary_emb = RotaryEmbedding(cfg.head_dim, max_positions, *ropes[FULL])
        # one table when both kinds share the rope (Gemma 2), else the sliding layers' own (Gemma 3)
        self.rotary_emb_local = (
            self.rotary_emb
            if ropes[SLIDING] == ropes[FULL]
            else RotaryEmbedding(cfg.head_dim, max_positions, *ropes[SLIDING])
        )
        self.layers = nn.ModuleList(
            GemmaDecoderLayer(cfg, i, kind == SLIDING) for i, kind in enumerate(kinds)
        )
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def input_rows(self, fb: ForwardBatch) -> torch.Tensor:
        """The first layer's input ``[T, hidden]``: the scaled token embeddings."""
        h = self.embed_tokens(fb.input_ids)
        return h * torch.tensor(self.embed_scale, dtype=h.dtype)  # the scale in the model dtype, as HF

    def forward(self, fb: ForwardBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """The last layer's ``(output, residual)`` ``[T, hidden]``; their sum is the hidden state
        before the final norm."""
        h = self.input_rows(fb)
        residual = None
        for layer in self.layers:
            rotary = self.rotary_emb_local if layer.sliding else self.rotary_emb
            h, residual = layer(h, residual, rotary, fb)
        assert residual is not None, "a model has at least one layer"
        return h, residual


class GemmaForCausalLM(LlamaForCausalLM):
    """Gemma 2 / Gemma 3 text; ``forward(fb)`` -> float32 logits ``[len(fb.logits_indices), vocab]``."""

    model_cls = GemmaModel  # type: ignore[assignment]  # same interface as LlamaModel
    plain_norms = ""  # a prefix of parameters whose norms are not Gemma's (a vision tower's LayerNorms)

    def __init__(self, cfg: ModelConfig, max_positions: int | None = None) -> None:
        if cfg.hf.get("use_bidirectional_attention"):
            raise ValueError(f"{cfg.architecture} with use_bidirectional_attention is not supported")
        if cfg.architecture == "Gemma3ForCausalLM":
            cfg = replace(cfg, qk_norm=True)
        super().__init__(cfg, max_positions)
        cap = cfg.hf.get("final_logit_softcapping")
        self.final_logit_softcap = None if cap is None else float(cap)

    def compute_logits(self, h: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """The last residual add and the final norm, the LM head, then the final soft-cap (in the
        model dtype, as transformers); float32 ``[n, vocab_size]``."""
        x, _ = self.model.norm.add_and_norm(h, residual)
        logits = self.lm_head.project(x)
        # NOTE: under tensor parallelism these are this rank's vocabulary slice: the cap is
        # elementwise, so capping each slice before the gather gives tp 1's logits exactly
        if self.final_logit_softcap is not None:
            logits = torch.tanh(logits / self.final_logit_softcap) * self.final_logit_softcap
        return logits.float()

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy Hugging Face-named tensors in (norm weights as ``1 + w``); raise if any parameter
        stays unset."""
        tied = self.config.tie_word_embeddings
        load_checkpoint(
            self,
            ((name, _gemma_norm_weight(name, tensor, self.plain_norms)) for name, tensor in weights),
            skip=lambda name: "rotary_emb" in name or (tied and name == "lm_head.weight"),
        )


def _gemma_norm_weight(name: str, tensor: StoredTensor, plain_prefix: str = "") -> StoredTensor:
    """Gemma stores a norm's scale as ``w`` and applies ``1 + w`` (added in fp32, as transformers);
    other tensors, and those under ``plain_prefix``, pass as stored (GGUF blocks stay blocks)."""
    plain = bool(plain_prefix) and name.startswith(plain_prefix)
    return as_float(tensor).float() + 1.0 if name.endswith("norm.weight") and not plain else tensor


def _rope_per_kind(cfg: ModelConfig) -> dict[str, tuple[float, dict[str, Any] | None]]:
    """``(theta, scaling)`` of the global and the sliding layers.

    transformers 5 writes Gemma 3's as ``rope_parameters`` keyed by layer kind; older configs give
    the global ``rope_theta``/``rope_scaling`` and the local ``rope_local_base_freq``. Gemma 2 has
    one rope for both (``ModelConfig``'s)."""
    params = cfg.hf.get("rope_parameters")
    if isinstance(params, dict) and isinstance(params.get(FULL), dict):
        out = {}
        for kind in (FULL, SLIDING):
            p = dict(params.get(kind) or params[FULL])
            rope_type = p.get("rope_type") or p.get("type") or "default"
            out[kind] = (float(p.get("rope_theta", 10000.0)), None if rope_type == "default" else p)
        return out
    global_rope = (cfg.rope_theta, cfg.rope_scaling)
    local = cfg.hf.get("rope_local_base_freq")
    return {FULL: global_rope, SLIDING: global_rope if local is None else (float(local), None)}
