"""Llama-family decoders served for embeddings and scores instead of text.

- ``LlamaEmbeddingModel``: the bare decoder (``Qwen3Model``, ``LlamaModel``: how sentence-transformers
  saves one), no LM head; ``forward`` returns the final normed hidden states of the selected tokens.
- ``LlamaForSequenceClassification``: a ``score`` head on the last token (reward models, classifiers).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from radixlm.runtime.executor.forward_batch import ForwardBatch
from radixlm.runtime.layers.linear import Linear
from radixlm.runtime.layers.module import Module
from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.llama import LlamaForCausalLM
from radixlm.runtime.models.weight_loading import load_checkpoint


def final_hidden(model: Module, fb: ForwardBatch) -> torch.Tensor:
    """The final normed hidden states ``[T, hidden]`` of every new token of a Llama-family model."""
    h, residual = model.model(fb)
    x, _ = model.model.norm.add_and_norm(h, residual)
    return x


class LlamaEmbeddingModel(LlamaForCausalLM):
    """``forward(fb)`` -> the final hidden states ``[len(fb.logits_indices), hidden]``."""

    supports_tensor_parallel = False
    supports_cuda_graph = False
    generates = False  # served with --is-embedding only

    def __init__(self, cfg: ModelConfig, max_positions: int | None = None) -> None:
        Module.__init__(self)
        self.config = cfg
        self.model = self.model_cls(cfg, max_positions or cfg.max_position_embeddings)

    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        return final_hidden(self, fb)[fb.logits_indices].float()

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """A bare decoder's names lack the ``model.`` prefix; an LM head, if saved, is unused."""

        def named() -> Iterable[tuple[str, torch.Tensor]]:
            for name, tensor in weights:
                yield (name if name.startswith("model.") else f"model.{name}"), tensor

        load_checkpoint(
            self, named(), skip=lambda name: "rotary_emb." in name or name == "model.lm_head.weight"
        )


class LlamaForSequenceClassification(LlamaForCausalLM):
    """``forward(fb)`` -> float32 scores ``[len(fb.logits_indices), num_labels]`` (the last token's)."""

    supports_tensor_parallel = False
    supports_cuda_graph = False
    generates = False  # served with --is-embedding only

    def __init__(self, cfg: ModelConfig, max_positions: int | None = None) -> None:
        Module.__init__(self)
        self.config = cfg
        self.model = self.model_cls(cfg, max_positions or cfg.max_position_embeddings)
        labels = len(cfg.hf.get("id2label") or {}) or int(cfg.hf.get("num_labels", 2))
        self.score = Linear(cfg.hidden_size, labels)

    def compute_logits(self, h: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        x, _ = self.model.norm.add_and_norm(h, residual)
        return self.score.project(x).float()

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        load_checkpoint(self, weights, skip=lambda name: "rotary_emb." in name)
