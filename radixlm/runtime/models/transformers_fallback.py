"""The transformers fallback: any Hugging Face causal LM on our runtime through transformers' modeling code.

``TransformersCausalLM`` wraps the model transformers builds for a checkpoint (``from_pretrained``,
with ``attn_implementation`` set to our paged attention, ``models/transformers_attention.py``). A
step's tokens of every request run through it as one sequence ``[1, T]`` with ``position_ids`` =
``fb.positions``; each attention layer stores its K/V in our pool and attends per request, so the
radix cache, batching, chunked prefill and constrained decoding work as for a native model. The LM
head (with the model's own final norm, logit scaling or soft-capping) runs on the selected rows only
(``logits_to_keep``). Its ``nn.Linear`` layers become our ``Linear`` (``transformers_linears.py``),
so their products take our CPU kernels and packed weights.

At load a two-token probe forward checks that every layer's attention goes through the interface
and needs nothing our backends do not compute; its calls give the KV pool's shape (layers, KV heads,
head size), whatever the config's field names.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from radixlm.runtime.executor.forward_batch import ForwardBatch
from radixlm.runtime.layers.packed_weights import repack_weights
from radixlm.runtime.models.model_impl import ModelDims
from radixlm.runtime.models.transformers_attention import (
    ATTN_IMPLEMENTATION,
    AttentionProbe,
    AttentionShape,
    batch_context,
    check_probe,
    probing,
    register_attention,
)
from radixlm.runtime.models.transformers_linears import use_our_linears
from radixlm.runtime.models.weight_loading import load_checkpoint

logger = logging.getLogger(__name__)

_DEFAULT_CONTEXT = 2048


class TransformersCausalLM(nn.Module):
    """``forward(fb)`` -> float32 logits ``[len(fb.logits_indices), vocab_size]``, like a native model."""

    #: untested under CUDA graph capture (transformers' forward is free to sync or branch on values)
    supports_cuda_graph = False

    def __init__(self, hf_model: nn.Module) -> None:
        super().__init__()
        self.hf = hf_model
        self.config = hf_model.config
        self._keeps_logits = "logits_to_keep" in inspect.signature(hf_model.forward).parameters

    def forward(self, fb: ForwardBatch) -> torch.Tensor:
        keep: dict[str, Any] = {"logits_to_keep": fb.logits_indices} if self._keeps_logits else {}
        with batch_context(fb):
            out = self.hf(
                input_ids=fb.input_ids.unsqueeze(0),
                position_ids=fb.positions.unsqueeze(0),
                use_cache=False,
                **keep,
            )
        logits = out.logits[0]
        return (logits if self._keeps_logits else logits[fb.logits_indices]).float()

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy Hugging Face-named tensors into the transformers model (names as in its state dict);
        raise if one is unexpected or a parameter stays unset. A tied LM head's tensor is skipped.
        Packed copies of the weights (``pack_model_weights``) are renewed."""
        own = {name for name, _ in self.hf.named_parameters()}
        aliases = {name for name, _ in self.hf.named_parameters(remove_duplicate=False)} - own
        load_checkpoint(self.hf, weights, stacking=(), skip=lambda name: name in aliases)
        repack_weights(self.hf)

    @torch.inference_mode()
    def probe(self, architecture: str, context_length: int) -> AttentionShape:
        """Run two tokens through the model with the attention calls recorded; the KV pool's shape,
        or ValueError naming what the fallback cannot serve exactly."""
        device = next(self.hf.parameters()).device
        probe = AttentionProbe()
        ids = torch.zeros(1, 2, dtype=torch.int64, device=device)
        with probing(probe):
            self.hf(input_ids=ids, position_ids=torch.arange(2, device=device).unsqueeze(0), use_cache=False)
        num_layers = int(getattr(self.config, "num_hidden_layers", len(probe.calls)))
        return check_probe(probe, architecture, num_layers, context_length)


def load_transformers_model(
    model_path: str,
    hf_config: dict[str, Any],
    device: torch.device,
    dtype: torch.dtype,
    context_length: int | None,
) -> tuple[TransformersCausalLM, ModelDims]:
    """Build ``model_path``'s transformers model with our attention, probe it, and return it with
    the dimensions the runtime sizes its pools from."""
    from transformers import AutoModelForCausalLM

    architecture = str((hf_config.get("architectures") or ["?"])[0])
    register_attention()
    try:
        hf: Any = AutoModelForCausalLM.from_pretrained(
            model_path, dtype=dtype, attn_implementation=ATTN_IMPLEMENTATION
        )
    except (ValueError, KeyError) as exc:  # no causal-LM class; attention classes picked by name (Falcon)
        raise ValueError(
            f"cannot serve {architecture} through the transformers fallback: transformers could not build "
            f"it with attn_implementation={ATTN_IMPLEMENTATION!r} ({type(exc).__name__}: {exc})"
        ) from exc
    hf = hf.to(device).eval().requires_grad_(False)
    use_our_linears(hf)
    net = TransformersCausalLM(hf)
    context = context_length or int(getattr(hf.config, "max_position_embeddings", None) or _DEFAULT_CONTEXT)
    shape = net.probe(architecture, context)
    logger.warning(
        "serving %s through the transformers fallback (%s): %d layers, %d KV heads of %d",
        architecture,
        type(hf).__name__,
        shape.num_layers,
        shape.num_kv_heads,
        shape.head_dim,
    )
    dims = ModelDims(
        architecture=architecture,
        vocab_size=_logits_width(hf),
        context_length=context,
        num_layers=shape.num_layers,
        num_kv_heads=shape.num_kv_heads,
        head_dim=shape.head_dim,
        impl="transformers",
    )
    return net, dims


def _logits_width(hf: Any) -> int:
    head = hf.get_output_embeddings()
    weight = getattr(head, "weight", None)
    return int(weight.shape[0]) if weight is not None else int(hf.config.vocab_size)


def check_fallback_options(quantization: str, tp_size: int) -> None:
    """ValueError for the runtime options the fallback does not serve."""
    if quantization not in ("auto", "none"):
        raise ValueError(
            f"quantization {quantization!r} swaps our own layers; the transformers fallback serves "
            f"float weights only (quantization='none')"
        )
    if tp_size > 1:
        raise ValueError("the transformers fallback runs on one device (tp_size=1)")
