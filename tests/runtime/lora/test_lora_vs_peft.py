"""LoRA serving against PEFT on the same tiny random base and adapters: logits and greedy tokens per
adapter, and one batch mixing four adapters and the base model."""

from __future__ import annotations

import pytest
import torch

from radixlm.runtime.executor.forward_batch import ForwardMode
from tests.helpers.lora_helpers import PeftReference
from tests.helpers.model_helpers import TINY_SEQ, PagedSession, assert_logits_close, make_runner

RTOL = 2e-4


@pytest.fixture(scope="module")
def runner(lora_base, adapters):
    paths = tuple(f"{name}={path}" for name, path in adapters.items())
    return make_runner(lora_base, enable_lora=True, lora_paths=paths, max_loras_per_batch=4, max_lora_rank=16)


def forward(session: PagedSession, mode, rows, tokens, names, all_logits=False) -> list[torch.Tensor]:
    """One step of ``rows`` with per-row adapter ``names`` (None: base); logits per row."""
    lora = session.runner.lora
    fb = session._build(mode, rows, tokens, all_logits)
    fb.lora_slots = lora.assign([None if n is None else lora.get(n) for n in names])
    logits = session.runner.forward(fb)
    return list(logits.split([len(t) for t in tokens])) if all_logits else list(logits.unbind(0))


@pytest.mark.parametrize("name", ["all8", "qv4rs", "mlp16", "ko2", None])
def test_prefill_decode_and_greedy_match_peft(runner, lora_base, adapters, name):
    ref = PeftReference(lora_base, adapters[name] if name else None)
    s = PagedSession(runner)
    row = s.open()
    prompt, rest = TINY_SEQ[:-3], TINY_SEQ[-3:]
    ours = forward(s, ForwardMode.EXTEND, [row], [prompt], [name], all_logits=True)[0]
    expected = ref.logits(TINY_SEQ)
    assert_logits_close(ours, expected[: len(prompt)], RTOL)
    for i, tok in enumerate(rest):
        step = forward(s, ForwardMode.DECODE, [row], [[tok]], [name])[0]
        assert_logits_close(step, expected[len(prompt) + i], RTOL)
    s.close(row)

    s = PagedSession(runner)
    row = s.open()
    last = int(forward(s, ForwardMode.EXTEND, [row], [prompt], [name])[0].argmax())
    greedy = [last]
    for _ in range(7):
        last = int(forward(s, ForwardMode.DECODE, [row], [[last]], [name])[0].argmax())
        greedy.append(last)
    s.close(row)
    assert greedy == ref.greedy(prompt, 8)


def test_one_batch_mixing_four_adapters_and_base(runner, lora_base, adapters):
    # all8 twice and apart, so its rows are not one contiguous segment
    names = ["all8", None, "qv4rs", "mlp16", "all8", "ko2"]
    prompts = [TINY_SEQ[i : i + 9 + i] for i in range(len(names))]
    refs = {n: PeftReference(lora_base, adapters[n] if n else None) for n in set(names)}
    expected = [refs[n].logits(p) for n, p in zip(names, prompts)]
    s = PagedSession(runner)
    rows = [s.open() for _ in names]
    ours = forward(s, ForwardMode.EXTEND, rows, prompts, names, all_logits=True)
    for got, want in zip(ours, expected):
        assert_logits_close(got, want, RTOL)
    nxt = [int(o[-1].argmax()) for o in ours]
    step = forward(s, ForwardMode.DECODE, rows, [[t] for t in nxt], names)
    for got, n, p, t in zip(step, names, prompts, nxt):
        assert_logits_close(got, refs[n].logits([*p, t])[-1], RTOL)
    for row in rows:
        s.close(row)


def test_more_adapters_than_slots_in_one_batch_is_refused(lora_base, adapters):
    paths = tuple(f"{name}={path}" for name, path in adapters.items())
    small = make_runner(
        lora_base, enable_lora=True, lora_paths=paths, max_loras_per_batch=3, max_lora_rank=16
    )
    lora = small.lora
    with pytest.raises(ValueError, match="4 LoRA adapters in one batch > --max-loras-per-batch 3"):
        lora.assign([lora.get(n) for n in ["all8", "qv4rs", "mlp16", "ko2"]])
    # the least recently used slot makes room: three batches of three cycle through four adapters
    for names in (["all8", "qv4rs", "mlp16"], ["ko2", "qv4rs", "mlp16"], ["all8", None, "ko2"]):
        slots = lora.assign([None if n is None else lora.get(n) for n in names])
        resident = [None if s < 0 else lora.slot_adapter[s].name for s in slots]
        assert resident == names


def test_adapters_change_the_logits(runner):
    s = PagedSession(runner)
    rows = [s.open(), s.open()]
    base, tuned = forward(s, ForwardMode.EXTEND, rows, [TINY_SEQ, TINY_SEQ], [None, "all8"])
    assert (base - tuned).abs().max() > 0.1
    for row in rows:
        s.close(row)


def test_int8_base_with_an_adapter_follows_peft(lora_base, adapters):
    """On the int8 path the LoRA add is separate from the quantized product: the logits stay near
    PEFT's adapter logits (within int8's own error), far from the base model's."""
    int8 = make_runner(
        lora_base, quantization="int8", enable_lora=True, lora_paths=(f"all8={adapters['all8']}",)
    )
    s = PagedSession(int8)
    row = s.open()
    ours = forward(s, ForwardMode.EXTEND, [row], [TINY_SEQ], ["all8"], all_logits=True)[0]
    s.close(row)
    tuned = PeftReference(lora_base, adapters["all8"]).logits(TINY_SEQ)
    base = PeftReference(lora_base, None).logits(TINY_SEQ)
    err, gap = (ours - tuned).abs().max(), (base - tuned).abs().max()
    assert err < 0.1 * gap, (err, gap)
