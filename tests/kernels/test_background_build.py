"""A server started while the kernels are being built serves at once on the torch ops, and takes
the kernels as soon as the build is done: no request waits on a compiler."""

from __future__ import annotations

import contextlib
import shutil
import time
from pathlib import Path

import pytest
import torch

from radixlm.kernels.cpu.build import DECODE_KERNELS, GGUF_KERNELS, build_directory, exclusive_build
from radixlm.kernels.cpu.kernel_slot import KernelSlot
from tests.helpers.built_kernels import needs_cpu_kernels
from tests.helpers.engines import make_engine
from tests.helpers.model_helpers import save_tiny_gguf, tiny_llama_config

pytestmark = needs_cpu_kernels
SLOTS = (DECODE_KERNELS, GGUF_KERNELS)
PARAMS = {"temperature": 0, "max_new_tokens": 8, "ignore_eos": True}
FIRST = [5, 9, 14, 3]
LATER = [[7, 8, 9, 10, 11], [30, 31, 2, 40], [12, 13]]  # not FIRST's prefix: no KV of the fallback reused


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> str:
    from transformers import LlamaForCausalLM

    config = tiny_llama_config(tie_word_embeddings=True)
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny-gguf") / "tiny-q4_0.gguf"
    save_tiny_gguf(
        config, LlamaForCausalLM(config).state_dict(), path, {"proj": "Q4_0", "embed_tokens": "Q8_0"}
    )
    return str(path)


def _generate(engine, prompts: list[list[int]]) -> list[list[int]]:
    return [engine.generate(input_ids=ids, sampling_params=PARAMS)["output_ids"] for ids in prompts]


def _forget_loaded_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process as a fresh server sees it: nothing loaded, no build started (undone after the test)."""
    for slot in SLOTS:
        fresh = KernelSlot(slot.name, slot._wrap, slot._builder)
        for attribute, value in vars(fresh).items():
            monkeypatch.setattr(slot, attribute, value)


@pytest.mark.parametrize("model", ["float", "gguf"])
def test_a_server_started_during_a_build_serves_at_once_then_takes_the_kernels(
    model: str, tiny_llama_dir: str, tiny_gguf: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, options = (tiny_llama_dir, {}) if model == "float" else (tiny_gguf, {"quantization": "auto"})
    with make_engine(path, device="cpu", **options) as engine:  # the kernels are loaded from the start
        reference = _generate(engine, LATER)
    built = {slot.name: build_directory(slot.name) for slot in SLOTS}

    monkeypatch.setenv("RADIXLM_CACHE", str(tmp_path / "cache"))
    _forget_loaded_kernels(monkeypatch)
    with contextlib.ExitStack() as another_build:  # another process holds the build lock
        for slot in SLOTS:
            another_build.enter_context(exclusive_build(build_directory(slot.name)))
        start = time.monotonic()
        engine = make_engine(path, device="cpu", **options)
        try:
            assert len(_generate(engine, [FIRST])[0]) == PARAMS["max_new_tokens"]
            assert time.monotonic() - start < 10
            assert engine.get_server_info()["quantization"] == ("none" if model == "float" else "q4_0")
            assert all(slot.get() is None and slot.pending() for slot in SLOTS)  # served on torch ops
            for slot in SLOTS:  # ... which finishes the build and lets go
                name = f"radixlm_{slot.name}"
                for file in (f"{name}.so", "ready"):
                    shutil.copy2(built[slot.name] / file, build_directory(slot.name) / file)
            another_build.close()
            deadline = time.monotonic() + 120
            while any(slot.get() is None for slot in SLOTS):
                assert time.monotonic() < deadline
                assert all(slot.get() is not None or slot.pending() for slot in SLOTS)  # none gave up
                time.sleep(0.2)
            assert _generate(engine, LATER) == reference  # the kernels serve, as from the start
        finally:
            engine.shutdown()
