"""LoRA under tensor parallelism on CPU with gloo (tp_size=2, a tiny random Llama with GQA: 4 query heads,
2 KV heads): a batch mixing two adapters and the base model gives PEFT's logits and tp_size=1's, greedy
tokens through the scheduler equal PEFT's, and adapters load and unload while requests run, a bad one
refused on every rank. One tensor-parallel scheduler serves the whole module."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from radixlm.runtime.executor.forward_batch import ForwardMode
from radixlm.runtime.messages import LoRAAdapterReq, TokenizedGenerateReq
from radixlm.runtime.sampling.sampling_params import SamplingParams
from tests.helpers.engines import tiny_scheduler
from tests.helpers.lora_helpers import PeftReference, save_peft_adapter
from tests.helpers.model_helpers import (
    TINY_SEQ,
    PagedSession,
    assert_logits_close,
    make_runner,
    save_tiny_model,
    tiny_llama_config,
)

RTOL = 2e-4
NEW = 6
LORA = dict(enable_lora=True, max_loras_per_batch=2, max_lora_rank=16)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return save_tiny_model(tiny_llama_config(num_key_value_heads=2), tmp_path_factory.mktemp("tp_lora_base"))


@pytest.fixture(scope="module")
def adapters(base, tmp_path_factory) -> dict:
    """Every projection at rank 8; k and o (a row-parallel one) at rank 2; q and v with rsLoRA."""
    root = tmp_path_factory.mktemp("tp_adapters")
    specs = {
        "all8": dict(rank=8, alpha=16.0, seed=1),
        "ko2": dict(rank=2, alpha=4.0, targets=["k_proj", "o_proj"], seed=4),
        "qv4rs": dict(rank=4, alpha=8.0, targets=["q_proj", "v_proj"], use_rslora=True, seed=2),
    }
    return {name: save_peft_adapter(base, root / name, **spec) for name, spec in specs.items()}


@pytest.fixture(scope="module")
def sched(base, adapters):
    paths = [f"{n}={adapters[n]}" for n in ("all8", "ko2")]
    with tiny_scheduler(str(base), tp_size=2, attention_backend="torch", lora_paths=paths, **LORA) as s:
        yield s


def _forward(runner, session, mode, rows, tokens, names) -> list[torch.Tensor]:
    lora = runner.lora
    fb = session._build(mode, rows, tokens, mode == ForwardMode.EXTEND)
    fb.lora_slots = lora.assign([None if n is None else lora.get(n) for n in names])
    logits = runner.forward(fb)
    return list(logits.split([len(t) for t in tokens])) if mode == ForwardMode.EXTEND else list(logits)


def _mixed_batch(runner) -> list[torch.Tensor]:
    """Prefill logits of four prompts under all8, the base, ko2, all8, then one decode step's."""
    names = ["all8", None, "ko2", "all8"]
    prompts = [TINY_SEQ[i : i + 8 + 2 * i] for i in range(len(names))]
    s = PagedSession(runner)
    rows = [s.open() for _ in names]
    out = _forward(runner, s, ForwardMode.EXTEND, rows, prompts, names)
    nxt = [[int(o[-1].argmax())] for o in out]
    out += _forward(runner, s, ForwardMode.DECODE, rows, nxt, names)
    for row in rows:
        s.close(row)
    return out


def test_mixed_batch_matches_peft_and_tp1(sched, base, adapters):
    got = _mixed_batch(sched.runner)
    single = make_runner(base, lora_paths=tuple(f"{n}={adapters[n]}" for n in ("all8", "ko2")), **LORA)
    expected = _mixed_batch(single)
    for ours, one in zip(got, expected):
        assert_logits_close(ours, one, RTOL)
    names = ["all8", None, "ko2", "all8"]
    refs = {n: PeftReference(base, adapters[n] if n else None) for n in set(names)}
    for i, n in enumerate(names):
        prompt = TINY_SEQ[i : i + 8 + 2 * i]
        want = refs[n].logits([*prompt, int(got[i][-1].argmax())])
        assert_logits_close(got[i], want[:-1], RTOL)
        assert_logits_close(got[len(names) + i], want[-1], RTOL)
    sched.check_kv_integrity()


def _req(rid: str, prompt: list[int], lora: str | None, new: int = NEW) -> TokenizedGenerateReq:
    params = SamplingParams(temperature=0, max_new_tokens=new, ignore_eos=True)
    return TokenizedGenerateReq(rid, np.asarray(prompt, dtype=np.int32), params, lora_name=lora)


def _step(sched, outs: dict) -> None:
    for out in sched.step():
        rec = outs.setdefault(out.rid, {"ids": []})
        rec["ids"] += out.new_token_ids.tolist()
        rec["finish"] = out.finish_reason


def _run(sched, outs: dict) -> None:
    while sched.has_work():
        _step(sched, outs)


def test_greedy_tokens_of_mixed_requests_match_peft(sched, base, adapters):
    outs: dict = {}
    names = {"a": "all8", "base": None, "k": "ko2", "a2": "all8"}
    for i, (rid, name) in enumerate(names.items()):
        sched.handle(_req(rid, TINY_SEQ[i : i + 9], name))
    _run(sched, outs)
    for i, (rid, name) in enumerate(names.items()):
        ref = PeftReference(base, adapters[name] if name else None)
        assert outs[rid]["ids"] == ref.greedy(TINY_SEQ[i : i + 9], NEW), rid
    sched.check_kv_integrity()


def test_load_and_unload_while_serving(sched, base, adapters, tmp_path):
    outs: dict = {}
    sched.handle(_req("long-all8", TINY_SEQ[:8], "all8", new=16))
    sched.handle(_req("long-base", TINY_SEQ[2:10], None, new=16))
    for _ in range(3):
        _step(sched, outs)
    reply = sched.handle(LoRAAdapterReq("all8"))  # unloaded on every rank while its request runs
    assert reply.success and "all8" not in [a["name"] for a in reply.adapters]
    reply = sched.handle(LoRAAdapterReq("qv4rs", str(adapters["qv4rs"])))
    assert reply.success, reply.message
    bad = sched.handle(LoRAAdapterReq("bad", str(base)))  # a model, not an adapter: refused, no rank has it
    assert not bad.success and "'bad'" in bad.message and "adapter_config.json" in bad.message
    sched.handle(_req("late-qv", TINY_SEQ[4:12], "qv4rs"))
    sched.handle(_req("late-ko2", TINY_SEQ[3:11], "ko2"))
    sched.handle(_req("late-all8", TINY_SEQ[4:12], "all8"))
    _run(sched, outs)
    assert outs["late-all8"]["finish"]["status_code"] == 400
    assert outs["long-all8"]["ids"] == PeftReference(base, adapters["all8"]).greedy(TINY_SEQ[:8], 16)
    assert outs["long-base"]["ids"] == PeftReference(base, None).greedy(TINY_SEQ[2:10], 16)
    assert outs["late-qv"]["ids"] == PeftReference(base, adapters["qv4rs"]).greedy(TINY_SEQ[4:12], NEW)
    assert outs["late-ko2"]["ids"] == PeftReference(base, adapters["ko2"]).greedy(TINY_SEQ[3:11], NEW)
    # all8 again under its name: a fresh load on every rank, served as PEFT serves it
    assert sched.handle(LoRAAdapterReq("all8", str(adapters["all8"]))).success
    sched.handle(_req("again-all8", TINY_SEQ[5:13], "all8"))
    _run(sched, outs)
    assert outs["again-all8"]["ids"] == PeftReference(base, adapters["all8"]).greedy(TINY_SEQ[5:13], NEW)
    assert [r["alive"] for r in sched.runner.tp_status()] == [True, True]
    sched.check_kv_integrity()
