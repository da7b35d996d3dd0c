"""LoRA through the scheduler: mixed-adapter batches give PEFT's greedy tokens, the radix cache never
shares KV across adapters, and adapters load and unload while requests run without losing a request
or leaking KV."""

from __future__ import annotations

import numpy as np
import pytest

from radixlm.runtime.messages import LoRAAdapterReq, TokenizedGenerateReq
from radixlm.runtime.sampling.sampling_params import SamplingParams
from tests.helpers.engines import tiny_scheduler
from tests.helpers.lora_helpers import PeftReference
from tests.helpers.model_helpers import TINY_SEQ

NEW = 6


def _req(rid: str, prompt: list[int], lora: str | None, new: int = NEW) -> TokenizedGenerateReq:
    params = SamplingParams(temperature=0, max_new_tokens=new, ignore_eos=True)
    return TokenizedGenerateReq(rid, np.asarray(prompt, dtype=np.int32), params, lora_name=lora)


def _run(sched, outs: dict) -> None:
    """Step until idle, collecting each request's tokens, finish reason and cached tokens."""
    while sched.has_work():
        for out in sched.step():
            rec = outs.setdefault(out.rid, {"ids": []})
            rec["ids"] += out.new_token_ids.tolist()
            rec["cached"], rec["finish"] = out.cached_tokens, out.finish_reason


@pytest.fixture()
def sched(lora_base, adapters):
    paths = [f"{n}={p}" for n, p in adapters.items() if n != "ko2"]
    with tiny_scheduler(
        str(lora_base), enable_lora=True, lora_paths=paths, max_loras_per_batch=2, max_lora_rank=16
    ) as s:
        yield s


def test_mixed_adapters_match_peft_with_at_most_two_per_batch(sched, lora_base, adapters):
    names = ["all8", None, "qv4rs", "mlp16", "all8", None]
    prompts = [TINY_SEQ[i : i + 8] for i in range(len(names))]
    for i, (n, p) in enumerate(zip(names, prompts)):
        sched.handle(_req(f"r{i}", p, n))
    outs: dict = {}
    _run(sched, outs)
    refs = {n: PeftReference(lora_base, adapters[n] if n else None) for n in set(names)}
    for i, (n, p) in enumerate(zip(names, prompts)):
        assert outs[f"r{i}"]["ids"] == refs[n].greedy(p, NEW), (i, n)
    sched.check_kv_integrity()


def test_radix_cache_is_keyed_by_adapter(sched):
    prompt = TINY_SEQ * 2
    outs: dict = {}
    for rid, lora in [("a1", "all8"), ("b1", "qv4rs"), ("base1", None), ("a2", "all8"), ("base2", None)]:
        sched.handle(_req(rid, prompt, lora))
        _run(sched, outs)
    assert outs["a1"]["cached"] == 0
    assert outs["b1"]["cached"] == 0  # same text, another adapter: nothing shared
    assert outs["base1"]["cached"] == 0  # nor with the base model
    assert outs["a2"]["cached"] == len(prompt) - 1  # the same adapter shares as before
    assert outs["base2"]["cached"] == len(prompt) - 1
    sched.check_kv_integrity()


def test_load_and_unload_while_serving(sched, lora_base, adapters):
    outs: dict = {}
    sched.handle(_req("long-all8", TINY_SEQ[:8], "all8", new=20))
    sched.handle(_req("long-base", TINY_SEQ[2:10], None, new=20))
    for _ in range(3):
        for out in sched.step():
            outs.setdefault(out.rid, {"ids": []})["ids"] += out.new_token_ids.tolist()
    reply = sched.handle(LoRAAdapterReq("all8"))  # unloaded while its request runs
    assert reply.success and "all8" not in [a["name"] for a in reply.adapters]
    reply = sched.handle(LoRAAdapterReq("ko2", str(adapters["ko2"])))
    assert reply.success, reply.message
    bad = sched.handle(LoRAAdapterReq("bad", str(lora_base)))  # a model, not an adapter
    assert not bad.success and "'bad'" in bad.message and "adapter_config.json" in bad.message
    sched.handle(_req("late-ko2", TINY_SEQ[4:12], "ko2"))
    sched.handle(_req("late-all8", TINY_SEQ[4:12], "all8"))
    _run(sched, outs)
    assert outs["late-all8"]["finish"]["type"] == "abort"
    assert "'all8' is not loaded" in outs["late-all8"]["finish"]["message"]
    assert outs["late-all8"]["finish"]["status_code"] == 400
    assert outs["long-all8"]["ids"] == PeftReference(lora_base, adapters["all8"]).greedy(TINY_SEQ[:8], 20)
    assert outs["long-base"]["ids"] == PeftReference(lora_base, None).greedy(TINY_SEQ[2:10], 20)
    assert outs["late-ko2"]["ids"] == PeftReference(lora_base, adapters["ko2"]).greedy(TINY_SEQ[4:12], NEW)
    sched.check_kv_integrity()
