"""A tensor-parallel rank's share of a LoRA adapter is cut exactly where ``shard_llama`` cuts the base
weight (query heads, KV heads even or replicated, intermediate slices; ``A`` columns of o/down), and a
rank > 0's adapter pool follows rank 0's loads, slot fills and drops (``LoRASync``), here in one
process (tests/runtime/distributed/test_tensor_parallel_lora.py runs the ranks for real)."""

from __future__ import annotations

import gc

import pytest
import torch

from radixlm.runtime.distributed.partition import TPShard
from radixlm.runtime.distributed.shard_llama import shard_llama
from radixlm.runtime.lora.adapter import load_adapter
from radixlm.runtime.lora.manager import LoRAManager
from radixlm.runtime.lora.rank_shard import rank_slices
from radixlm.runtime.lora.targets import TARGETS
from tests.helpers.model_helpers import make_runner, save_tiny_model, tiny_llama_config

SIZE = 2


def _rank_model(base, rank: int) -> torch.nn.Module:
    model = make_runner(base, disable_weight_packing=True).model
    shard_llama(model, TPShard(rank, SIZE))
    return model


@pytest.mark.parametrize("kv_heads", [1, 2])  # 1: each rank keeps a replica of the one KV head
def test_slices_follow_the_base_weights_sharding(tmp_path, kv_heads):
    base = save_tiny_model(tiny_llama_config(num_key_value_heads=kv_heads), tmp_path / "base")
    whole_model = make_runner(base, disable_weight_packing=True).model
    whole, cfg = whole_model.model.layers[0], whole_model.config
    q_size, kv_size = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    for rank in range(SIZE):
        layer = _rank_model(base, rank).model.layers[0]
        s = rank_slices(cfg, TPShard(rank, SIZE))
        w = whole.self_attn.qkv_proj.weight
        offsets = {"q_proj": 0, "k_proj": q_size, "v_proj": q_size + kv_size}
        expect = torch.cat([w.narrow(0, offsets[m] + s[m].start, s[m].count) for m in offsets])
        assert torch.equal(layer.self_attn.qkv_proj.weight, expect)
        w = whole.mlp.gate_up_proj.weight
        gate, up = s["gate_proj"], s["up_proj"]
        expect = torch.cat(
            [w.narrow(0, gate.start, gate.count), w.narrow(0, cfg.intermediate_size + up.start, up.count)]
        )
        assert torch.equal(layer.mlp.gate_up_proj.weight, expect)
        for module, ours, owner in [
            ("o_proj", layer.self_attn.o_proj, whole.self_attn.o_proj),
            ("down_proj", layer.mlp.down_proj, whole.mlp.down_proj),
        ]:
            assert s[module].axis == "in"
            assert torch.equal(ours.part.weight, owner.weight.narrow(1, s[module].start, s[module].count))


def _manager(base, rank: int) -> LoRAManager:
    model = _rank_model(base, rank)
    shard = TPShard(rank, SIZE)
    cpu = torch.device("cpu")
    return LoRAManager(model, model.config, 2, 16, frozenset(TARGETS), torch.float32, cpu, shard)


def _load_on_both(leader: LoRAManager, follower: LoRAManager, name: str, path) -> int:
    ns = leader.namespace_of(leader.load(name, path))
    assert follower.apply_op({"op": "load", "name": name, "path": str(path), "namespace": ns})
    return ns


def test_a_follower_mirrors_loads_fills_and_drops(lora_base, adapters):
    leader, follower = _manager(lora_base, 0), _manager(lora_base, 1)
    ns_all8 = _load_on_both(leader, follower, "all8", adapters["all8"])
    ours = follower.adapters["all8"]
    whole = load_adapter("all8", adapters["all8"], leader.cfg, 16, frozenset(TARGETS))
    s = rank_slices(leader.cfg, TPShard(1, SIZE))
    a, b = ours.weights[(0, "k_proj")]
    assert torch.equal(a, whole.weights[(0, "k_proj")][0])
    assert torch.equal(b, whole.weights[(0, "k_proj")][1].narrow(0, s["k_proj"].start, s["k_proj"].count))
    a, b = ours.weights[(1, "down_proj")]
    assert torch.equal(
        a, whole.weights[(1, "down_proj")][0].narrow(1, s["down_proj"].start, s["down_proj"].count)
    )
    assert torch.equal(b, whole.weights[(1, "down_proj")][1])

    # a bad adapter on a follower: it says so (rank 0 then refuses it everywhere)
    assert not follower.apply_op({"op": "load", "name": "bad", "path": str(lora_base), "namespace": 99})

    leader.begin(leader.assign([None, leader.get("all8")]), [3, 1])
    sync = leader.take_sync()
    assert (sync.slots, sync.tokens, sync.fills, sync.drops) == ([-1, 0], [3, 1], [(0, ns_all8)], [])
    follower.apply_sync(sync)
    assert follower.slot_adapter[0] is ours and follower.batch.segments == leader.batch.segments

    # unloaded, then evicted from its slot by two newer adapters: rank 0 lets the others drop it
    leader.unload("all8")
    assert follower.apply_op({"op": "unload", "name": "all8"})
    ns_qv = _load_on_both(leader, follower, "qv4rs", adapters["qv4rs"])
    ns_ko = _load_on_both(leader, follower, "ko2", adapters["ko2"])
    leader.begin(leader.assign([leader.get("qv4rs")]), [2])
    leader.begin(leader.assign([leader.get("ko2"), leader.get("qv4rs")]), [1, 1])
    del ours
    gc.collect()
    sync = leader.take_sync()
    assert sync.fills == [(1, ns_qv), (0, ns_ko)] and sync.drops == [ns_all8]
    follower.apply_sync(sync)
    assert sorted(follower.by_namespace) == [ns_qv, ns_ko]
    assert [a.name for a in follower.slot_adapter] == ["ko2", "qv4rs"]
