"""Cut a loaded Llama-family model down to one tensor-parallel rank's share, in place.

Column-parallel: q/k/v (this rank's query heads and KV heads) and gate/up (its slice of the
intermediate size). Row-parallel with an all-reduce: o_proj and down_proj. Vocabulary-parallel: the
embedding and the LM head (tied or not). Every rank reads the whole checkpoint and keeps its part.
"""
from __future__ import annotations

from torch import nn

from radixlm.runtime.distributed.partition import TPShard
from radixlm.runtime.layers.parallel_linear import RowParallelLinear, shard_rows
from radixlm.runtime.layers.vocab_parallel import VocabParallelEmbedding


def shard_llama(model: nn.Module, shard: TPShard) -> int:
    """Shard ``model`` (a ``LlamaForCausalLM``) for ``shard``; returns the KV heads each rank keeps."""
    cfg = model.config
    kv_heads = 0
    for layer in model.model.layers:
        kv_heads = _shard_attention(layer.self_attn, shard)
        _shard_mlp(layer.mlp, shard)
    start, count = shard.padded_slice(cfg.vocab_size)
    tied = model.lm_head is model.model.embed_tokens
    model.model.embed_tokens = VocabParallelEmbedding(model.model.embed_tokens.weight.data, start, count)
    model.lm_head = model.model.embed_tokens if tied else \
        VocabParallelEmbedding(model.lm_head.weight.data, start, count)
    return kv_heads


def _shard_attention(attn: nn.Module, shard: TPShard) -> int:
    d = attn.head_dim
    q_first, q_count = shard.even_slice(attn.num_heads, "num_attention_heads")
    kv_first, kv_count = shard.kv_heads(attn.num_heads, attn.num_kv_heads)
    q_size, kv_size = attn.num_heads * d, attn.num_kv_heads * d
    shard_rows(attn.qkv_proj, [(q_first * d, q_count * d), (q_size + kv_first * d, kv_count * d),
                               (q_size + kv_size + kv_first * d, kv_count * d)])
    attn.qkv_proj.out_sizes = [q_count * d, kv_count * d, kv_count * d]
    attn.o_proj = RowParallelLinear(attn.o_proj, q_first * d, q_count * d)
    attn.num_heads, attn.num_kv_heads = q_count, kv_count
    attn.split_sizes = [q_count * d, kv_count * d, kv_count * d]
    attn.attn.num_heads, attn.attn.num_kv_heads = q_count, kv_count
    return kv_count


def _shard_mlp(mlp: nn.Module, shard: TPShard) -> None:
    inter = mlp.down_proj.weight.shape[1]
    start, count = shard.even_slice(inter, "intermediate_size")
    shard_rows(mlp.gate_up_proj, [(start, count), (inter + start, count)])
    mlp.gate_up_proj.out_sizes = [count, count]
    mlp.down_proj = RowParallelLinear(mlp.down_proj, start, count)
