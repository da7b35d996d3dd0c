"""An adapter that rank 0 loads but another rank cannot is refused on every rank: rank 0's ``load``
raises a ``ValueError`` naming it (the server's 400) and both ranks end without it, then a good one
loads on both. Two real ranks over gloo, each with its shard of a tiny Llama and its own ``LoRAManager``;
rank 1's reads of the refused adapter fail (as a file only one machine can read would)."""

from __future__ import annotations

import multiprocessing
import os
from types import SimpleNamespace

import torch

from radixlm.runtime.distributed import comm
from radixlm.runtime.distributed.batch_broadcast import recv_batch, send_lora, send_stop
from radixlm.runtime.distributed.partition import TPShard
from radixlm.runtime.distributed.shard_llama import shard_llama
from radixlm.runtime.lora import manager as manager_module
from radixlm.runtime.lora.manager import LoRAManager
from radixlm.runtime.lora.targets import TARGETS
from tests.helpers.lora_helpers import save_peft_adapter
from tests.helpers.model_helpers import make_runner, save_tiny_model, tiny_llama_config

CPU = torch.device("cpu")


def _rank(rank: int, addr: str, base: str, good: str, refused: str, results) -> None:
    torch.set_num_threads(1)
    comm.init_group(addr, rank, 2, CPU)
    try:
        model = make_runner(base, disable_weight_packing=True).model
        shard_llama(model, TPShard(rank, 2))
        lora = LoRAManager(
            model, model.config, 2, 16, frozenset(TARGETS), torch.float32, CPU, TPShard(rank, 2)
        )
        if rank == 0:
            lora.broadcast = lambda op: send_lora(op, CPU)
            try:
                lora.load("far", refused)
                error = ""
            except ValueError as exc:
                error = str(exc)
            lora.load("near", good)
            send_stop(CPU)
            results.put((rank, error, sorted(lora.adapters)))
        else:
            real = manager_module.load_adapter

            def load_here(name, path, *args):
                if str(path) == refused:
                    raise ValueError(f"LoRA adapter {name!r} ({path}): unreadable on this rank")
                return real(name, path, *args)

            manager_module.load_adapter = load_here
            assert recv_batch(SimpleNamespace(device=CPU, lora=lora)) is None  # the ops, then stop
            results.put((rank, "", sorted(lora.adapters)))
    finally:
        # rank 0 told rank 1 to stop: it waits for rank 1 to leave before its process may end
        comm.destroy_group(wait_for_ranks=rank == 0)
    # NOTE: a rank that got here did all the test asks; in loaded CI runs rank 1 still aborted in the
    # interpreter's teardown afterwards ("terminate called without an active exception", 2 of 3 runs
    # on 2026-12-04, never alone), so it ends without one once its result is delivered.
    results.close()
    results.join_thread()
    os._exit(0)


def test_an_adapter_one_rank_cannot_load_is_refused_on_all(tmp_path):
    base = save_tiny_model(tiny_llama_config(num_key_value_heads=2), tmp_path / "base")
    good = save_peft_adapter(base, tmp_path / "good", rank=4, seed=1)
    refused = save_peft_adapter(base, tmp_path / "refused", rank=4, seed=2)
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    addr = comm.free_local_addr()
    procs = [
        ctx.Process(target=_rank, args=(r, addr, str(base), str(good), str(refused), results)) for r in (0, 1)
    ]
    for p in procs:
        p.start()
    got = dict((rank, (error, names)) for rank, error, names in (results.get(timeout=120) for _ in procs))
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    error, names = got[0]
    assert "'far'" in error and "could not be loaded on every tensor-parallel rank" in error
    assert names == ["near"] and got[1][1] == ["near"]
