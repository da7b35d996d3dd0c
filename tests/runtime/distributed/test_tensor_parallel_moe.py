"""Tensor parallelism for mixture-of-experts models on CPU with gloo: tp_size=2 (every rank the
whole router and a half of every expert's intermediate size, then an all-reduce) generates what
tp_size=1 does on tiny random Mixtral and Qwen3-MoE (with a dense layer) checkpoints."""

from __future__ import annotations

import pytest

from tests.helpers.engines import make_engine
from tests.helpers.model_helpers import save_tiny_model
from tests.runtime.models.test_moe import tiny_mixtral_config, tiny_qwen3_moe_config

CONFIGS = {
    "mixtral": lambda: tiny_mixtral_config(),
    "qwen3-moe-dense-layer": lambda: tiny_qwen3_moe_config(mlp_only_layers=[1]),
}
PROMPTS = ["The quick brown fox jumps over", "A shared system prompt, then user one", "x" * 40]
GREEDY = {"max_new_tokens": 16, "temperature": 0, "ignore_eos": True}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_tp2_matches_tp1(name: str, tmp_path) -> None:
    model_dir = str(save_tiny_model(CONFIGS[name](), tmp_path))
    with make_engine(model_dir, device="cpu") as single:
        expected = single.generate(PROMPTS, GREEDY, return_logprob=True)
    with make_engine(model_dir, device="cpu", tp_size=2) as engine:
        got = engine.generate(PROMPTS, GREEDY, return_logprob=True)
        engine.check_kv_integrity()
    assert [o["output_ids"] for o in got] == [o["output_ids"] for o in expected]
    for a, b in zip(got, expected):
        lp_a = [t[0] for t in a["meta_info"]["output_token_logprobs"]]
        lp_b = [t[0] for t in b["meta_info"]["output_token_logprobs"]]
        assert lp_a == pytest.approx(lp_b, abs=1e-4)
