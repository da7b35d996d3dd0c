"""Phi-3, Phi-3.5 and Phi-4-mini (``Phi3ForCausalLM``): the Llama block as is.

LongRoPE (short and long factors, picked per token position: ``layers/rope_scaling.py``) and
Phi-4-mini's partial rotary come with the rope dict ``ModelConfig`` normalizes. The checkpoint stores
q/k/v and gate/up already fused (``qkv_proj``, ``gate_up_proj``): ``load_weights`` cuts them into the
separate projections ``load_checkpoint`` stacks. A ``sliding_window`` is not applied (exact for
contexts within the window; Phi-4-mini's equals its context).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch

from radixlm.runtime.models.llama import LlamaForCausalLM

# fused checkpoint projection -> the projections it concatenates, in order
FusedParts = dict[str, tuple[tuple[str, int], ...]]


class Phi3ForCausalLM(LlamaForCausalLM):
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        cfg = self.config
        q, kv, inter = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim, cfg.intermediate_size
        parts: FusedParts = {
            "qkv_proj": (("q_proj", q), ("k_proj", kv), ("v_proj", kv)),
            "gate_up_proj": (("gate_proj", inter), ("up_proj", inter)),
        }
        super().load_weights(split_fused(weights, parts))


def split_fused(
    weights: Iterable[tuple[str, torch.Tensor]], parts: FusedParts
) -> Iterator[tuple[str, torch.Tensor]]:
    """Each fused tensor ``...<fused>.<param>`` as its row blocks ``...<part>.<param>`` (views)."""
    for name, tensor in weights:
        module, _, param = name.rpartition(".")
        prefix, _, fused = module.rpartition(".")
        if fused not in parts:
            yield name, tensor
            continue
        sizes = [size for _, size in parts[fused]]
        if tensor.shape[0] != sum(sizes):
            raise ValueError(
                f"checkpoint tensor {name!r} has {tensor.shape[0]} rows; the config needs {sum(sizes)}"
            )
        for (part, _), block in zip(parts[fused], tensor.split(sizes, dim=0)):
            yield f"{prefix}.{part}.{param}".lstrip("."), block
