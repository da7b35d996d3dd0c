"""The whole engine on a GPU: scheduler, Triton attention, CUDA graphs, sampling and grammar masks.

The kernel tests check each piece against its reference; this checks that they are wired together
on CUDA: an fp32 engine on the GPU must generate the same greedy tokens as the same engine on the
CPU (the two differ only in kernels and summation order, which a random 2-layer model in fp32 does
not amplify into a different argmax over 24 tokens), a JSON-schema request must give valid JSON, and
every KV slot must be back in the pool afterwards. Skipped without CUDA.
"""

from __future__ import annotations

import json

import pytest
import torch

from tests.helpers.engines import make_engine
from tests.helpers.kv_ownership import assert_engine_kv_returned

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

GREEDY = {"temperature": 0, "max_new_tokens": 24}
PROMPTS = [f"question {i}: " + "why is the sky blue " * (i % 4) for i in range(12)]
SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer", "minimum": 0}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def cpu_tokens(tiny_llama_dir) -> list[list[int]]:
    engine = make_engine(tiny_llama_dir, device="cpu")
    try:
        return [out["output_ids"] for out in engine.generate(PROMPTS, GREEDY)]
    finally:
        engine.shutdown()


@pytest.mark.parametrize("cuda_graph", [False, True])
def test_gpu_engine_matches_cpu_engine(tiny_llama_dir, cpu_tokens, cuda_graph):
    engine = make_engine(
        tiny_llama_dir,
        device="cuda",
        dtype="float32",
        attention_backend="triton",
        disable_cuda_graph=not cuda_graph,
    )
    try:
        batched = [out["output_ids"] for out in engine.generate(PROMPTS, GREEDY)]
        single = engine.generate(PROMPTS[3], GREEDY)["output_ids"]
        assert batched == cpu_tokens
        assert single == cpu_tokens[3]
        out = engine.generate(
            "Give me a person: ",
            {"temperature": 0.7, "max_new_tokens": 64, "json_schema": json.dumps(SCHEMA)},
        )
        person = json.loads(out["text"])
        assert set(person) == {"name", "age"} and isinstance(person["age"], int)
        assert_engine_kv_returned(engine)
    finally:
        engine.shutdown()
