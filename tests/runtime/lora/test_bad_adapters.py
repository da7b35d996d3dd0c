"""Bad adapters are refused with a ValueError naming the adapter and the problem; the pool keeps
serving what it had."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.helpers.lora_helpers import save_peft_adapter
from tests.helpers.model_helpers import make_runner, save_tiny_model, tiny_llama_config


@pytest.fixture(scope="module")
def runner(lora_base, adapters):
    return make_runner(
        lora_base,
        enable_lora=True,
        lora_paths=(f"good={adapters['all8']}",),
        max_lora_rank=8,
        lora_target_modules=("qkv_proj", "o_proj", "gate_up_proj", "down_proj"),
    )


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def test_missing_and_corrupt(runner, adapters, tmp_path):
    lora = runner.lora
    with pytest.raises(ValueError, match=r"'nope' .*no adapter_config.json"):
        lora.load("nope", tmp_path / "absent")
    bad_json = _copy(adapters["all8"], tmp_path / "json")
    (bad_json / "adapter_config.json").write_text("{not json")
    with pytest.raises(ValueError, match="'json' .*corrupt adapter_config.json"):
        lora.load("json", bad_json)
    bad_st = _copy(adapters["all8"], tmp_path / "st")
    (bad_st / "adapter_model.safetensors").write_bytes(b"\x00" * 40)
    with pytest.raises(ValueError, match="'st' .*corrupt adapter weights"):
        lora.load("st", bad_st)
    assert [a["name"] for a in lora.info()] == ["good"]


def test_rank_targets_shapes_and_names(runner, adapters, lora_base, tmp_path):
    lora = runner.lora
    with pytest.raises(ValueError, match="'big' .*rank 16 exceeds --max-lora-rank 8"):
        lora.load("big", adapters["mlp16"])
    other = save_tiny_model(tiny_llama_config(hidden_size=32), tmp_path / "other_base", with_tokenizer=False)
    with pytest.raises(ValueError, match="'foreign' .*an adapter for another base model"):
        lora.load("foreign", save_peft_adapter(other, tmp_path / "foreign", rank=4))
    odd = _copy(adapters["ko2"], tmp_path / "odd")
    cfg = json.loads((odd / "adapter_config.json").read_text())
    (odd / "adapter_config.json").write_text(json.dumps({**cfg, "use_dora": True}))
    with pytest.raises(ValueError, match="'odd' .*DoRA is not supported"):
        lora.load("odd", odd)
    with pytest.raises(ValueError, match="'good' is already loaded"):
        lora.load("good", adapters["ko2"])
    with pytest.raises(ValueError, match="is not loaded"):
        lora.get("ko2")
    assert [a["name"] for a in lora.info()] == ["good"]


def test_target_outside_the_flag(lora_base, adapters):
    runner = make_runner(lora_base, enable_lora=True, lora_target_modules=("q_proj", "v_proj"))
    with pytest.raises(ValueError, match="'all' .*'down_proj' is outside --lora-target-modules"):
        runner.lora.load("all", adapters["all8"])
    runner.lora.load("qv", adapters["qv4rs"])
    with pytest.raises(ValueError, match="unsupported LoRA target module 'lm_head'"):
        make_runner(lora_base, enable_lora=True, lora_target_modules=("lm_head",))


def test_max_loaded_loras_bounds_the_host_pool(lora_base, adapters):
    runner = make_runner(
        lora_base,
        enable_lora=True,
        max_loras_per_batch=1,
        max_loaded_loras=2,
        lora_paths=(f"a={adapters['all8']}",),
        max_lora_rank=16,
    )
    lora = runner.lora
    lora.load("b", adapters["ko2"])
    with pytest.raises(ValueError, match="'c' cannot be loaded: 2 adapters are loaded"):
        lora.load("c", adapters["qv4rs"])
    lora.unload("a")
    lora.load("c", adapters["qv4rs"])  # room again once one is unloaded
    assert sorted(a["name"] for a in lora.info()) == ["b", "c"]


def test_max_loaded_loras_checked_at_start(lora_base, adapters):
    with pytest.raises(ValueError, match=r"max_loaded_loras \(1\) must be >= max_loras_per_batch \(2\)"):
        make_runner(lora_base, enable_lora=True, max_loras_per_batch=2, max_loaded_loras=1)
    paths = (f"a={adapters['all8']}", f"b={adapters['ko2']}")
    with pytest.raises(ValueError, match=r"2 --lora-paths exceed max_loaded_loras \(1\)"):
        make_runner(lora_base, enable_lora=True, max_loras_per_batch=1, max_loaded_loras=1, lora_paths=paths)
