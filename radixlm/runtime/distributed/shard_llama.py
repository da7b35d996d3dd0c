"""Cut a loaded Llama-family model down to one tensor-parallel rank's share, in place, after its
layers were quantized (or not): every rank keeps exactly the values one process would serve.

Column-parallel: q/k/v (this rank's query heads and KV heads) and gate/up (its slice of the
intermediate size). Row-parallel with an all-reduce: o_proj and down_proj. A mixture-of-experts block
keeps its whole router and every expert cut to the rank's slice of the expert intermediate size,
then all-reduces (``RowParallelSparseMoe``). Vocabulary-parallel: the
embedding and the LM head (tied or not). Every rank reads the whole checkpoint and keeps its part.
A q/k norm over the whole projection (OLMo 2, OLMoE: ``qk_norm_spans_heads``) becomes a
``ParallelRMSNorm`` over this rank's heads; a per-head one (Qwen3, Gemma 3) stays as it is.
"""

from __future__ import annotations

from torch import nn

from radixlm.runtime.distributed.partition import TPShard
from radixlm.runtime.layers.moe import SparseMoeBlock
from radixlm.runtime.layers.parallel_linear import RowParallelLinear, column_shard
from radixlm.runtime.layers.parallel_moe import RowParallelSparseMoe
from radixlm.runtime.layers.parallel_norm import ParallelRMSNorm
from radixlm.runtime.layers.vocab_parallel import VocabParallelEmbedding, vocab_rows


def shard_llama(model: nn.Module, shard: TPShard) -> int:
    """Shard ``model`` (a ``LlamaForCausalLM``) for ``shard``; returns the KV heads each rank keeps."""
    if not getattr(model, "supports_tensor_parallel", False):
        name = getattr(getattr(model, "config", None), "architecture", type(model).__name__)
        raise ValueError(f"{name} cannot be split across tensor-parallel ranks: serve it with tp_size 1")
    cfg = model.config
    kv_heads = 0
    for i, layer in enumerate(model.model.layers):
        kv_heads = _shard_attention(layer.self_attn, shard, f"model.layers.{i}.self_attn")
        if isinstance(layer.mlp, SparseMoeBlock):
            inter = layer.mlp.experts.intermediate_size
            start, count = shard.even_slice(inter, f"model.layers.{i}.mlp expert intermediate size")
            layer.mlp = RowParallelSparseMoe(layer.mlp, start, count)
        else:
            _shard_mlp(layer.mlp, shard, cfg.intermediate_size, f"model.layers.{i}.mlp")
    start, count = shard.padded_slice(cfg.vocab_size)
    tied = model.lm_head is model.model.embed_tokens
    embed = VocabParallelEmbedding(vocab_rows(model.model.embed_tokens, start, count), start, count)
    model.model.embed_tokens = embed
    model.lm_head = embed if tied else vocab_rows(model.lm_head, start, count)
    return kv_heads


def _shard_attention(attn: nn.Module, shard: TPShard, name: str) -> int:
    d = attn.head_dim
    q_first, q_count = shard.even_slice(attn.num_heads, "num_attention_heads")
    kv_first, kv_count = shard.kv_heads(attn.num_heads, attn.num_kv_heads)
    q_size, kv_size = attn.num_heads * d, attn.num_kv_heads * d
    attn.qkv_proj = column_shard(
        attn.qkv_proj,
        [
            (q_first * d, q_count * d),
            (q_size + kv_first * d, kv_count * d),
            (q_size + kv_size + kv_first * d, kv_count * d),
        ],
    )
    if getattr(attn, "qk_norm_spans_heads", False):
        kv_copies = shard.size * kv_count // attn.num_kv_heads  # > 1: KV heads replicated
        attn.q_norm = ParallelRMSNorm.of(attn.q_norm, q_first * d, q_count * d, copies=1)
        attn.k_norm = ParallelRMSNorm.of(attn.k_norm, kv_first * d, kv_count * d, copies=kv_copies)
    attn.o_proj = RowParallelLinear.of(attn.o_proj, q_first * d, q_count * d, f"{name}.o_proj", shard.size)
    attn.num_heads, attn.num_kv_heads = q_count, kv_count
    attn.split_sizes = [q_count * d, kv_count * d, kv_count * d]
    attn.attn.num_heads, attn.attn.num_kv_heads = q_count, kv_count
    return kv_count


def _shard_mlp(mlp: nn.Module, shard: TPShard, inter: int, name: str) -> None:
    start, count = shard.even_slice(inter, "intermediate_size")
    mlp.gate_up_proj = column_shard(mlp.gate_up_proj, [(start, count), (inter + start, count)])
    mlp.down_proj = RowParallelLinear.of(mlp.down_proj, start, count, f"{name}.down_proj", shard.size)
