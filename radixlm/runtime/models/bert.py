"""BERT / RoBERTa / XLM-R encoders (bidirectional attention, no KV cache): sentence embeddings and
cross-encoder scores.

An encoder runs as its own forward over a batch (``pooling/encoder_batches.py`` calls it), not through
the paged KV pool: every token attends to every other token of its sequence, once. Inside, the tokens
stay packed (no padded token goes through a linear layer) and only the attention sees a padded batch.
Module names follow the Hugging Face checkpoints, so loading is a name-for-name copy (less the
``bert.``/``roberta.`` prefix of the classification checkpoints; query, key and value go into the
blocks of one merged projection).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.runtime.layers.linear import Linear, MergedLinear

ENCODER_ARCHITECTURES = {
    "BertModel": ("bert", False),
    "RobertaModel": ("roberta", False),
    "XLMRobertaModel": ("roberta", False),
    "BertForSequenceClassification": ("bert", True),
    "RobertaForSequenceClassification": ("roberta", True),
    "XLMRobertaForSequenceClassification": ("roberta", True),
}
_QKV = {"query": 0, "key": 1, "value": 2}  # the blocks of an attention's merged projection
_ACTIVATIONS = {
    "gelu": lambda x: F.gelu(x),
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
}


def _activation(cfg: dict[str, Any]) -> Any:
    name = cfg.get("hidden_act", "gelu")
    if name not in _ACTIVATIONS:
        raise ValueError(f"encoder hidden_act {name!r} is not supported (expected {', '.join(_ACTIVATIONS)})")
    return _ACTIVATIONS[name]


class _Embeddings(nn.Module):
    def __init__(self, cfg: dict[str, Any], roberta: bool) -> None:
        super().__init__()
        hidden = cfg["hidden_size"]
        self.word_embeddings = nn.Embedding(cfg["vocab_size"], hidden)
        self.position_embeddings = nn.Embedding(cfg["max_position_embeddings"], hidden)
        self.token_type_embeddings = nn.Embedding(max(int(cfg.get("type_vocab_size", 2)), 1), hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=cfg.get("layer_norm_eps", 1e-12))
        # RoBERTa counts positions from padding_idx + 1 (its position table reserves the pad rows)
        self.position_offset = int(cfg.get("pad_token_id", 1)) + 1 if roberta else 0

    def forward(self, ids: torch.Tensor, types: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Packed tokens ``[T]`` (their positions within their sequences) -> ``[T, hidden]``."""
        x = (
            self.word_embeddings(ids)
            + self.position_embeddings(positions + self.position_offset)
            + self.token_type_embeddings(types)
        )
        return self.LayerNorm(x)


class _Packing:
    """``T`` real tokens of ``bs`` sequences padded to ``length``: ``index`` places them in the flat
    ``[bs * length]`` padded layout (None when nothing is padded), ``mask`` keeps a query to its own
    sequence's real tokens."""

    def __init__(self, valid: torch.Tensor) -> None:
        self.bs, self.length = valid.shape
        padded = not bool(valid.all())
        self.index = valid.flatten().nonzero().squeeze(1) if padded else None
        self.mask = valid[:, None, None, :] if padded else None

    def pad(self, x: torch.Tensor) -> torch.Tensor:
        """``[T, n]`` -> ``[bs, length, n]`` (pads zero)."""
        if self.index is None:
            return x.view(self.bs, self.length, -1)
        out = x.new_zeros((self.bs * self.length, x.shape[-1]))
        out[self.index] = x
        return out.view(self.bs, self.length, -1)

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """``[bs, length, n]`` -> ``[T, n]``."""
        flat = x.reshape(self.bs * self.length, -1)
        return flat if self.index is None else flat[self.index]


class _Layer(nn.Module):
    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__()
        hidden, eps = cfg["hidden_size"], cfg.get("layer_norm_eps", 1e-12)
        self.num_heads = cfg["num_attention_heads"]
        self.attention = nn.Module()
        self.attention.self = nn.Module()
        self.attention.self.qkv = MergedLinear(hidden, [hidden] * 3, bias=True)  # query, key, value
        self.attention.output = nn.Module()
        self.attention.output.dense = Linear(hidden, hidden, bias=True)
        self.attention.output.LayerNorm = nn.LayerNorm(hidden, eps=eps)
        self.intermediate = nn.Module()
        self.intermediate.dense = Linear(hidden, cfg["intermediate_size"], bias=True)
        self.output = nn.Module()
        self.output.dense = Linear(cfg["intermediate_size"], hidden, bias=True)
        self.output.LayerNorm = nn.LayerNorm(hidden, eps=eps)
        self.act = _activation(cfg)

    def forward(self, x: torch.Tensor, packing: _Packing) -> torch.Tensor:
        """Packed ``[T, hidden]`` -> ``[T, hidden]``: the linear layers see real tokens only, the
        attention a padded batch."""
        att = self.attention.self
        bs, length = packing.bs, packing.length

        def heads(t: torch.Tensor) -> torch.Tensor:
            return packing.pad(t).view(bs, length, self.num_heads, -1).transpose(1, 2)

        q, k, v = (heads(t) for t in att.qkv(x).split(att.qkv.out_sizes, dim=-1))
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=packing.mask).transpose(1, 2)
        x = self.attention.output.LayerNorm(x + self.attention.output.dense(packing.pack(a)))
        return self.output.LayerNorm(x + self.output.dense(self.act(self.intermediate.dense(x))))


class _Encoder(nn.Module):
    def __init__(self, cfg: dict[str, Any], roberta: bool) -> None:
        super().__init__()
        self.embeddings = _Embeddings(cfg, roberta)
        self.encoder = nn.Module()
        self.encoder.layer = nn.ModuleList(_Layer(cfg) for _ in range(cfg["num_hidden_layers"]))


class EncoderModel(nn.Module):
    """An encoder, optionally with its sequence-classification head.

    ``forward(ids, types, lens)`` -> the last hidden states ``[bs, L, hidden]`` of a right-padded
    batch; ``classify`` -> the head's logits ``[bs, num_labels]``.
    """

    is_encoder = True
    supports_cuda_graph = False
    generates = False  # served with --is-embedding only

    def __init__(self, hf_config: dict[str, Any]) -> None:
        super().__init__()
        architecture = (hf_config.get("architectures") or [""])[0]
        if architecture not in ENCODER_ARCHITECTURES:
            raise ValueError(f"{architecture!r} is not an encoder architecture")
        self.prefix, self.has_head = ENCODER_ARCHITECTURES[architecture]
        roberta = self.prefix == "roberta"
        self.hf_config = hf_config
        setattr(self, self.prefix, _Encoder(hf_config, roberta))
        hidden = hf_config["hidden_size"]
        self.num_labels = len(hf_config.get("id2label") or {}) or int(hf_config.get("num_labels", 2))
        if self.has_head and roberta:
            self.classifier = nn.Module()
            self.classifier.dense = Linear(hidden, hidden, bias=True)
            self.classifier.out_proj = Linear(hidden, self.num_labels, bias=True)
        elif self.has_head:
            getattr(self, self.prefix).pooler = nn.Module()
            getattr(self, self.prefix).pooler.dense = Linear(hidden, hidden, bias=True)
            self.classifier = Linear(hidden, self.num_labels, bias=True)

    @property
    def body(self) -> _Encoder:
        return getattr(self, self.prefix)

    def forward(self, ids: torch.Tensor, types: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
        """Right-padded ``ids``/``types`` ``[bs, L]`` of lengths ``lens`` -> ``[bs, L, hidden]`` (pad
        rows zero). Inside, tokens stay packed: no padded token goes through a linear layer."""
        positions = torch.arange(ids.shape[1], device=ids.device)
        packing = _Packing(positions[None] < lens[:, None])
        packed_ids, packed_types = packing.pack(ids[..., None])[:, 0], packing.pack(types[..., None])[:, 0]
        packed_positions = packing.pack(positions.expand_as(ids)[..., None])[:, 0]
        x = self.body.embeddings(packed_ids, packed_types, packed_positions)
        for layer in self.body.encoder.layer:
            x = layer(x, packing)
        return packing.pad(x)

    def classify(self, ids: torch.Tensor, types: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
        if not self.has_head:
            raise ValueError(
                "this encoder has no classification head (a *ForSequenceClassification checkpoint)"
            )
        cls = self.forward(ids, types, lens)[:, 0]
        if self.prefix == "roberta":
            return self.classifier.out_proj(torch.tanh(self.classifier.dense(cls))).float()
        return self.classifier(torch.tanh(self.body.pooler.dense(cls))).float()

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy the checkpoint's tensors; ValueError naming any parameter left unset."""
        params = dict(self.named_parameters())
        loaded: set[str] = set()
        for name, tensor in weights:
            key = name if name.startswith((f"{self.prefix}.", "classifier.")) else f"{self.prefix}.{name}"
            owner, _, leaf = key.rpartition(".")
            block, _, proj = owner.rpartition(".")
            if proj in _QKV and block.endswith("attention.self"):  # one block of the merged qkv
                key, rows = f"{block}.qkv.{leaf}", tensor.shape[0]
                target, done = params[key].data.narrow(0, _QKV[proj] * rows, rows), f"{key}:{proj}"
            elif key in params:
                target, done = params[key].data, key
            else:
                continue  # position_ids buffers, a pooler this task does not use
            with torch.no_grad():
                target.copy_(tensor)
            loaded.add(done)
        loaded |= {k for k in params if all(f"{k}:{p}" in loaded for p in _QKV)}
        missing = sorted(set(params) - loaded)
        if missing:
            raise ValueError(f"no checkpoint tensor for {', '.join(missing[:8])}")
