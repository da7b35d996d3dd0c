"""One tensor-parallel rank's share of every LoRA adapter, cut exactly as ``shard_llama`` cuts the base.

A column-parallel projection (q/k/v, gate/up: the output split) keeps ``A`` whole and the rows of
``B'`` this rank's base keeps (its query heads, its KV heads, replicated when there are fewer KV heads
than ranks, its slice of the intermediate size). A row-parallel one (o, down: the input split) keeps
the columns of ``A`` matching this rank's input slice and ``B'`` whole: the rank's ``x_r A_r^T B'^T``
goes into its partial output before the all-reduce, and the sum over ranks is ``x A^T B'^T`` (the
scale, folded into ``B'``, applied once).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from radixlm.runtime.distributed.partition import TPShard
from radixlm.runtime.lora.adapter import LoRAAdapter
from radixlm.runtime.lora.targets import projection_shapes
from radixlm.runtime.models.config import ModelConfig


@dataclass(frozen=True)
class RankSlice:
    """The part of one projection a rank keeps: ``axis`` ``out`` (rows of ``B'``) or ``in`` (columns of
    ``A``), ``[start, start + count)`` of it; ``out_features``: the rank's output size."""

    axis: Literal["out", "in"]
    start: int
    count: int
    out_features: int


def rank_slices(cfg: ModelConfig, shard: TPShard) -> dict[str, RankSlice]:
    """Each PEFT-named projection's slice on ``shard`` (the base's sharding, ``shard_llama``)."""
    d, shapes = cfg.head_dim, projection_shapes(cfg)
    q_first, q_count = shard.even_slice(cfg.num_heads, "num_attention_heads")
    kv_first, kv_count = shard.kv_heads(cfg.num_heads, cfg.num_kv_heads)
    i_start, i_count = shard.even_slice(cfg.intermediate_size, "intermediate_size")
    kv = RankSlice("out", kv_first * d, kv_count * d, kv_count * d)
    gate_up = RankSlice("out", i_start, i_count, i_count)
    return {
        "q_proj": RankSlice("out", q_first * d, q_count * d, q_count * d),
        "k_proj": kv,
        "v_proj": kv,
        "o_proj": RankSlice("in", q_first * d, q_count * d, shapes["o_proj"].out_features),
        "gate_proj": gate_up,
        "up_proj": gate_up,
        "down_proj": RankSlice("in", i_start, i_count, shapes["down_proj"].out_features),
    }


def shard_adapter(adapter: LoRAAdapter, slices: dict[str, RankSlice]) -> None:
    """Keep only this rank's share of ``adapter``'s weights (validated whole), in place."""
    for key, (a, b) in adapter.weights.items():
        s = slices[key[1]]
        if s.axis == "out":
            b = b.narrow(0, s.start, s.count).contiguous()
        else:
            a = a.narrow(1, s.start, s.count).contiguous()
        adapter.weights[key] = (a, b)
