"""Llama-family decoders served for embeddings and scores instead of text.

- ``LlamaEmbeddingModel``: the bare decoder (``Qwen3Model``, ``LlamaModel``: how sentence-transformers
  saves one), no LM head; ``forward`` returns the final normed hidden states of the selected tokens.
- ``LlamaForSequenceClassification``: a ``score`` head on the last token (reward models, classifiers),
  or, for a causal LM configured as vLLM's ``hf_overrides`` convert one (``classifier_from_token`` with
  ``is_original_qwen3_reranker``: Qwen3-Reranker), the LM head's rows of its "no" and "yes" tokens only:
  one logit, ``logit_yes - logit_no``, whose sigmoid is ``softmax([logit_no, logit_yes])[1]``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

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


def classifier_tokens(hf: dict[str, Any]) -> tuple[str, ...]:
    """The answer tokens a causal LM is scored by (``classifier_from_token``, vLLM's override), or ()
    for an ordinary classifier; ValueError for a form other than Qwen3-Reranker's two tokens."""
    tokens = hf.get("classifier_from_token")
    if tokens is None:
        return ()
    pair = isinstance(tokens, list) and len(tokens) == 2 and all(isinstance(t, str) and t for t in tokens)
    if not (pair and hf.get("is_original_qwen3_reranker") is True):
        raise ValueError(
            f"classifier_from_token {tokens!r}: only Qwen3-Reranker's form is served, two tokens (the "
            'negative and the positive answer, e.g. ["no", "yes"]) with "is_original_qwen3_reranker": true'
        )
    return tuple(tokens)


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
    """``forward(fb)`` -> float32 scores ``[len(fb.logits_indices), num_labels]`` (the last token's).

    With ``classifier_from_token`` (a yes/no reranker) the one label is ``logit_yes - logit_no`` of the
    LM head; ``bind_tokenizer`` (called by the loader with the model's tokenizer) picks the two rows."""

    supports_tensor_parallel = False
    supports_cuda_graph = False
    generates = False  # served with --is-embedding only
    has_head = True

    def __init__(self, cfg: ModelConfig, max_positions: int | None = None) -> None:
        Module.__init__(self)
        self.config = cfg
        self.model = self.model_cls(cfg, max_positions or cfg.max_position_embeddings)
        self.answer_tokens = classifier_tokens(cfg.hf)
        # The prompt format the front end wraps a query and document in (pooling/rerank_prompt.py).
        self.rerank_format = "qwen3_yes_no" if self.answer_tokens else None
        self.answer_rows: torch.Tensor | None = None  # [2, hidden] float32: the "no" and "yes" rows
        self._vocab_head: torch.Tensor | None = None  # the whole LM head until bind_tokenizer
        if not self.answer_tokens:
            labels = len(cfg.hf.get("id2label") or {}) or int(cfg.hf.get("num_labels", 2))
            self.score = Linear(cfg.hidden_size, labels)

    def compute_logits(self, h: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        x, _ = self.model.norm.add_and_norm(h, residual)
        if not self.answer_tokens:
            return self.score.project(x).float()
        if self.answer_rows is None:
            raise RuntimeError("a yes/no reranker scores only after bind_tokenizer picked its tokens")
        no_yes = x.float() @ self.answer_rows.T
        return (no_yes[:, 1] - no_yes[:, 0]).unsqueeze(1)

    def bind_tokenizer(self, tokenizer: Any) -> None:
        """Keep the answer tokens' LM-head rows (float32) and drop the rest; ValueError when the
        tokenizer lacks one of them as a single token. A no-op for an ordinary classifier."""
        if not self.answer_tokens or self.answer_rows is not None:
            return
        vocab = tokenizer.get_vocab() if tokenizer is not None else {}
        missing = [t for t in self.answer_tokens if t not in vocab]
        if missing:
            raise ValueError(
                f"classifier_from_token: {', '.join(map(repr, missing))} is not a single token of this "
                "model's tokenizer; a yes/no reranker scores the logits of its answer tokens"
            )
        head = self._vocab_head
        assert head is not None  # load_weights keeps it
        ids = [int(vocab[t]) for t in self.answer_tokens]
        if max(ids) >= head.shape[0]:
            raise ValueError(f"classifier_from_token: ids {ids} exceed the LM head's {head.shape[0]} rows")
        device = self.model.embed_tokens.weight.device
        self.answer_rows = head[ids].to(device=device, dtype=torch.float32)
        self._vocab_head = None

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """A yes/no reranker's LM head (or, tied, its embeddings) is held for ``bind_tokenizer``."""
        if not self.answer_tokens:
            load_checkpoint(self, weights, skip=lambda name: "rotary_emb." in name)
            return
        head_name = "model.embed_tokens.weight" if self.config.tie_word_embeddings else "lm_head.weight"

        def named() -> Iterable[tuple[str, torch.Tensor]]:
            for name, tensor in weights:
                if name == head_name:
                    self._vocab_head = tensor
                if name != "lm_head.weight":
                    yield name, tensor

        load_checkpoint(self, named(), skip=lambda name: "rotary_emb." in name)
        if self._vocab_head is None:
            raise ValueError(f"a yes/no reranker needs its LM head: the checkpoint has no {head_name}")
