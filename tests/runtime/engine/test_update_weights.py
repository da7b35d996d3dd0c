"""``Engine.update_weights_from_disk`` and ``Engine.start_profile`` / ``stop_profile`` in process: the
engine serves the new checkpoint's greedy tokens (as transformers computes them on it), refuses
another shape with the old weights still serving, and writes a profiler trace."""

from __future__ import annotations

import glob

import pytest
import torch

from tests.helpers.engines import make_engine
from tests.helpers.model_helpers import save_tiny_gguf, save_tiny_model, tiny_llama_config

PROMPT = [1, 80, 114, 111, 102, 105, 108, 101]


def reference_greedy(model_dir: str, n: int) -> list[int]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    out = model.generate(torch.tensor([PROMPT]), max_new_tokens=n, min_new_tokens=n, do_sample=False)
    return out[0, len(PROMPT) :].tolist()


@pytest.fixture(scope="module")
def engine(tiny_llama_dir):
    engine = make_engine(tiny_llama_dir)
    yield engine
    engine.shutdown()


def greedy(engine, n: int) -> list[int]:
    params = {"max_new_tokens": n, "temperature": 0, "ignore_eos": True}
    return engine.generate(input_ids=PROMPT, sampling_params=params)["output_ids"]


def test_engine_update_weights_and_mismatch(engine, tiny_llama_dir, tmp_path):
    second = str(save_tiny_model(tiny_llama_config(), tmp_path / "second", seed=7))
    wider = str(save_tiny_model(tiny_llama_config(intermediate_size=96), tmp_path / "wider", seed=8))
    assert greedy(engine, 8) == reference_greedy(tiny_llama_dir, 8)
    ok, message = engine.update_weights_from_disk(second)
    assert ok, message
    assert greedy(engine, 8) == reference_greedy(second, 8)
    ok, message = engine.update_weights_from_disk(wider)
    assert not ok and "gate_up_proj.weight is (192, 64)" in message
    assert greedy(engine, 8) == reference_greedy(second, 8)
    engine.check_kv_integrity()


def test_engine_profile(engine, tmp_path):
    with pytest.raises(ValueError, match="not running"):
        engine.stop_profile()
    engine.start_profile(output_dir=str(tmp_path))
    with pytest.raises(ValueError, match="already"):
        engine.start_profile(output_dir=str(tmp_path))
    greedy(engine, 3)
    assert str(tmp_path) in engine.stop_profile()
    assert len(glob.glob(str(tmp_path / "*.trace.json.gz"))) == 1


def test_engine_update_from_one_gguf_to_another(tmp_path):
    """Block-quantized GGUF weights (Q8_0, served in their own format) update like HF ones: the same
    greedy tokens as an engine loaded from the second file directly."""
    from transformers import LlamaForCausalLM

    config = tiny_llama_config()
    files = []
    for seed in (11, 12):
        torch.manual_seed(seed)
        state = LlamaForCausalLM(config).state_dict()
        files.append(
            str(save_tiny_gguf(config, state, tmp_path / f"m{seed}.gguf", block_types={"proj": "Q8_0"}))
        )
    direct = make_engine(files[1], device="cpu", num_threads=1)
    try:
        expected = greedy(direct, 8)
    finally:
        direct.shutdown()
    engine = make_engine(files[0], device="cpu", num_threads=1)
    try:
        before = greedy(engine, 8)
        ok, message = engine.update_weights_from_disk(files[1], load_format="gguf")
        assert ok, message
        assert engine.model_info()["quantization"] == "q8_0"
        assert greedy(engine, 8) == expected != before
    finally:
        engine.shutdown()


def test_engine_update_copies_in_place_under_deterministic_inference(tiny_llama_dir, tmp_path):
    """Deterministic inference wraps the served tensors: the new weights are copied into them."""
    second = str(save_tiny_model(tiny_llama_config(), tmp_path / "second", seed=5))
    engine = make_engine(tiny_llama_dir, enable_deterministic_inference=True)
    try:
        model = engine.scheduler.runner.model
        ok, message = engine.update_weights_from_disk(second)
        assert ok, message
        assert engine.scheduler.runner.model is model
        assert greedy(engine, 8) == reference_greedy(second, 8)
    finally:
        engine.shutdown()
