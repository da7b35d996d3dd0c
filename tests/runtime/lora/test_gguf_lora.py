"""GGUF LoRA files (llama.cpp's ``convert_lora_to_gguf.py`` layout) against PEFT on the same adapter:
logits and greedy tokens on the tiny Llama from its HF directory and from its GGUF file, the same
tokens as the adapter's PEFT directory, and bad files refused with a ValueError naming the problem."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tests.helpers.gguf_lora_writer import save_gguf_lora
from tests.helpers.lora_helpers import PeftReference, greedy_under_adapter, save_peft_adapter
from tests.helpers.model_helpers import (
    TINY_SEQ,
    assert_logits_close,
    make_runner,
    save_tiny_gguf,
    save_tiny_model,
    tiny_llama_config,
)

RTOL = 2e-4
GGUF_NAMES = ("all8", "mlp16", "ko2")  # rsLoRA has no GGUF form (the converter keeps only lora_alpha)


@pytest.fixture(scope="module")
def base_config(lora_base) -> dict:
    return json.loads((lora_base / "config.json").read_text())


@pytest.fixture(scope="module")
def gguf_adapters(adapters, base_config, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("gguf_lora")
    return {n: save_gguf_lora(adapters[n], base_config, root / f"{n}.gguf") for n in GGUF_NAMES}


@pytest.fixture(scope="module")
def gguf_base(lora_base, tmp_path_factory):
    """The tiny Llama as llama.cpp would convert it (fp32, q/k rows permuted)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(lora_base), dtype=torch.float32)
    path = tmp_path_factory.mktemp("gguf_base") / "tiny.gguf"
    return save_tiny_gguf(AutoConfig.from_pretrained(str(lora_base)), model.state_dict(), path)


def _loras(gguf_adapters, adapters) -> tuple[str, ...]:
    return (*(f"{n}={p}" for n, p in gguf_adapters.items()), *(f"peft_{n}={adapters[n]}" for n in GGUF_NAMES))


@pytest.fixture(scope="module")
def runner(lora_base, gguf_adapters, adapters):
    return make_runner(
        lora_base, enable_lora=True, lora_paths=_loras(gguf_adapters, adapters), max_loras_per_batch=6
    )


@pytest.mark.parametrize("name", GGUF_NAMES)
def test_gguf_adapter_matches_peft_and_its_peft_directory(runner, lora_base, adapters, name):
    ref = PeftReference(lora_base, adapters[name])
    logits, tokens = greedy_under_adapter(runner, TINY_SEQ, name, 8)
    assert_logits_close(logits, ref.logits(TINY_SEQ), RTOL)
    assert tokens == ref.greedy(TINY_SEQ, 8)
    peft_logits, peft_tokens = greedy_under_adapter(runner, TINY_SEQ, f"peft_{name}", 8)
    assert peft_tokens == tokens
    assert_logits_close(logits, peft_logits, 1e-5)
    info = {a["name"]: a for a in runner.lora.info()}
    assert info[name]["rank"] == info[f"peft_{name}"]["rank"]
    assert info[name]["target_modules"] == info[f"peft_{name}"]["target_modules"]


def test_gguf_adapter_on_a_gguf_base(gguf_base, gguf_adapters, adapters, lora_base):
    runner = make_runner(gguf_base, enable_lora=True, lora_paths=_loras(gguf_adapters, adapters))
    for name in ("all8", "ko2"):
        ref = PeftReference(lora_base, adapters[name])
        logits, tokens = greedy_under_adapter(runner, TINY_SEQ, name, 8)
        assert_logits_close(logits, ref.logits(TINY_SEQ), RTOL)
        assert tokens == ref.greedy(TINY_SEQ, 8)


def test_f16_tensors_and_a_file_without_alpha(runner, adapters, base_config, lora_base, tmp_path):
    f16 = save_gguf_lora(adapters["all8"], base_config, tmp_path / "f16.gguf", tensor_type="F16")
    runner.lora.load("f16", f16)
    logits, _ = greedy_under_adapter(runner, TINY_SEQ, "f16", 1)
    assert_logits_close(logits, PeftReference(lora_base, adapters["all8"]).logits(TINY_SEQ), 2e-3)
    runner.lora.unload("f16")
    # llama.cpp applies a file without adapter.lora.alpha unscaled: alpha = rank gives the same product
    unit = save_peft_adapter(lora_base, tmp_path / "unit", rank=4, alpha=4.0, seed=5)
    path = save_gguf_lora(unit, base_config, tmp_path / "noalpha.gguf", with_alpha=False)
    runner.lora.load("noalpha", path)
    logits, _ = greedy_under_adapter(runner, TINY_SEQ, "noalpha", 1)
    assert_logits_close(logits, PeftReference(lora_base, unit).logits(TINY_SEQ), RTOL)
    runner.lora.unload("noalpha")


def test_q8_0_tensors_follow_peft(runner, base_config, lora_base, tmp_path):
    """The converter's q8_0 outtype (rank 32, so every row is whole Q8_0 blocks): near PEFT's adapter
    logits, within Q8_0's own error, far from the base model's."""
    r32 = save_peft_adapter(lora_base, tmp_path / "r32", rank=32, alpha=32.0, seed=6)
    runner.lora.load("q8", save_gguf_lora(r32, base_config, tmp_path / "q8.gguf", tensor_type="Q8_0"))
    ours, _ = greedy_under_adapter(runner, TINY_SEQ, "q8", 1)
    runner.lora.unload("q8")
    tuned = PeftReference(lora_base, r32).logits(TINY_SEQ)
    base = PeftReference(lora_base, None).logits(TINY_SEQ)
    err, gap = (ours - tuned).abs().max(), (base - tuned).abs().max()
    assert err < 0.05 * gap, (err, gap)


def test_bad_gguf_files(runner, adapters, base_config, gguf_base, tmp_path):
    lora = runner.lora
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"GGUF" + b"\x00" * 20)
    with pytest.raises(ValueError, match=r"'garbage' .*not a readable GGUF file"):
        lora.load("garbage", garbage)
    with pytest.raises(ValueError, match=r"'model' .*not a GGUF adapter file \(general.type"):
        lora.load("model", gguf_base)
    qwen = save_gguf_lora(adapters["ko2"], base_config, tmp_path / "qwen.gguf", arch="qwen2")
    with pytest.raises(
        ValueError, match=r"'qwen' .*adapter is for architecture 'qwen2', the base model is 'llama'"
    ):
        lora.load("qwen", qwen)
    half = save_gguf_lora(
        adapters["ko2"], base_config, tmp_path / "half.gguf", omit=frozenset({"blk.1.attn_k.weight.lora_b"})
    )
    with pytest.raises(ValueError, match=r"'half' .*layer 1 k_proj lacks its lora_B tensor"):
        lora.load("half", half)
    other = save_tiny_model(tiny_llama_config(hidden_size=32), tmp_path / "other", with_tokenizer=False)
    other_cfg = json.loads((other / "config.json").read_text())
    foreign = save_gguf_lora(save_peft_adapter(other, tmp_path / "o", rank=4), other_cfg, tmp_path / "f.gguf")
    with pytest.raises(ValueError, match=r"'foreign' .*an adapter for another base model"):
        lora.load("foreign", foreign)
    norm = {"blk.0.attn_norm.weight": np.ones(64, dtype=np.float32)}
    normed = save_gguf_lora(adapters["ko2"], base_config, tmp_path / "n.gguf", extra_tensors=norm)
    with pytest.raises(
        ValueError, match=r"'normed' .*'blk.0.attn_norm.weight' is not a lora_a/lora_b tensor"
    ):
        lora.load("normed", normed)
    embd = {"token_embd.weight.lora_a": np.ones((2, 320), np.float32)}
    embedded = save_gguf_lora(adapters["ko2"], base_config, tmp_path / "e.gguf", extra_tensors=embd)
    with pytest.raises(ValueError, match=r"'embd' .*LoRA on 'token_embd.weight'; only the decoder layers'"):
        lora.load("embd", embedded)
    assert "all8" in lora.adapters and not {"garbage", "qwen", "half", "foreign"} & set(lora.adapters)


def test_rank_over_the_limit_and_targets_outside_the_flag(lora_base, gguf_adapters):
    small = make_runner(
        lora_base,
        enable_lora=True,
        max_lora_rank=8,
        lora_target_modules=("qkv_proj", "gate_up_proj", "down_proj"),
    )
    with pytest.raises(ValueError, match=r"'big' .*rank 16 exceeds --max-lora-rank 8"):
        small.lora.load("big", gguf_adapters["mlp16"])
    with pytest.raises(ValueError, match=r"'ko' .*'o_proj' is outside --lora-target-modules"):
        small.lora.load("ko", gguf_adapters["ko2"])
