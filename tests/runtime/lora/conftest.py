"""A tiny random Llama and PEFT adapters on it, shared by the LoRA tests."""

from __future__ import annotations

import pytest

from tests.helpers.lora_helpers import save_peft_adapter
from tests.helpers.model_helpers import save_tiny_model, tiny_llama_config


@pytest.fixture(scope="session")
def lora_base(tmp_path_factory):
    return save_tiny_model(tiny_llama_config(), tmp_path_factory.mktemp("lora_base"))


@pytest.fixture(scope="session")
def adapters(lora_base, tmp_path_factory) -> dict:
    """Four adapters of different ranks, targets and scalings: name -> directory."""
    root = tmp_path_factory.mktemp("adapters")
    specs = {
        "all8": dict(rank=8, alpha=16.0, seed=1),
        "qv4rs": dict(rank=4, alpha=8.0, targets=["q_proj", "v_proj"], use_rslora=True, seed=2),
        "mlp16": dict(rank=16, alpha=8.0, targets=["gate_proj", "up_proj", "down_proj"], seed=3),
        "ko2": dict(rank=2, alpha=4.0, targets=["k_proj", "o_proj"], seed=4),
    }
    return {name: save_peft_adapter(lora_base, root / name, **spec) for name, spec in specs.items()}
