"""``layers.module.Module``: calling a runtime module calls its ``forward`` (an instance's own
``forward`` included), hooks are refused rather than ignored, and every module of a runtime model is
one (so none is left on hook dispatch)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from radixlm.runtime.layers.module import Module
from radixlm.runtime.models.config import ModelConfig
from radixlm.runtime.models.llama import LlamaForCausalLM


class Scale(Module):
    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, x: torch.Tensor, *, shift: float = 0.0) -> torch.Tensor:
        return x * self.factor + shift


class ScaleTwice(Scale):
    def forward(self, x: torch.Tensor, *, shift: float = 0.0) -> torch.Tensor:
        return super().forward(super().forward(x), shift=shift)


class Named(Scale):
    """No forward of its own: calls go to Scale's."""


def test_a_call_is_the_subclass_forward_with_its_arguments():
    x = torch.tensor([1.0, 2.0])
    assert torch.equal(Scale(3.0)(x, shift=1.0), torch.tensor([4.0, 7.0]))
    assert torch.equal(ScaleTwice(3.0)(x, shift=1.0), torch.tensor([10.0, 19.0]))
    assert torch.equal(Named(2.0)(x), torch.tensor([2.0, 4.0]))


def test_a_forward_set_on_the_instance_is_the_one_called():
    """As deterministic inference wraps the model's forward."""
    module = Scale(3.0)
    plain = module.forward
    module.forward = lambda x, **kwargs: plain(x, **kwargs) - 1
    assert torch.equal(module(torch.tensor([1.0]), shift=1.0), torch.tensor([3.0]))


@pytest.mark.parametrize(
    "register",
    [
        "register_forward_hook",
        "register_forward_pre_hook",
        "register_full_backward_hook",
        "register_full_backward_pre_hook",
        "register_backward_hook",
    ],
)
def test_registering_a_hook_raises_instead_of_being_ignored(register):
    with pytest.raises(NotImplementedError, match="ScaleTwice .*hooks registered on it would never run"):
        getattr(ScaleTwice(1.0), register)(lambda *args: None)


def test_every_module_of_a_runtime_model_calls_forward_directly():
    cfg = ModelConfig(
        architecture="Qwen3ForCausalLM",
        hidden_size=32,
        intermediate_size=64,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=8,
        vocab_size=64,
        max_position_embeddings=64,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        rope_scaling=None,
        tie_word_embeddings=False,
        qkv_bias=True,
        o_bias=True,
        qk_norm=True,
        mlp_bias=True,
        hidden_act="silu",
    )
    model = LlamaForCausalLM(cfg)
    on_dispatch = [name for name, m in model.named_modules() if not isinstance(m, (Module, nn.ModuleList))]
    assert on_dispatch == []
    assert sum(isinstance(m, Module) for m in model.modules()) > 10
