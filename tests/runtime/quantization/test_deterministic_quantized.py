"""--enable-deterministic-inference on quantized layers: a request's greedy and seeded outputs (texts
and logprobs, to the bit) are the same alone as inside a batch of 24.

The GGUF kernel quantizes activations per row in blocks of 32 and walks rows in passes whose size
follows the batch (``kernels/cpu/gguf_linear.cpp``); FBGEMM's int8 path scales each row first
(``Int8Linear``). Neither may let the batch change a row's bits.
"""

from __future__ import annotations

import pytest

from radixlm.kernels.cpu.build import load_gguf_kernels
from tests.helpers.engines import make_engine
from tests.helpers.model_helpers import save_tiny_model, tiny_llama_config

PROMPTS = [f"Question {i}: tell me a short fact about the number {i * 7}." for i in range(24)]


def _outputs(results: list[dict]) -> list[tuple[str, list[float]]]:
    return [(r["text"], [lp[0] for lp in r["meta_info"]["output_token_logprobs"]]) for r in results]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return save_tiny_model(tiny_llama_config(tie_word_embeddings=True), tmp_path_factory.mktemp("det-q"))


@pytest.mark.parametrize("method", ["q4_0", "q8_0", "int8"])
@pytest.mark.parametrize(
    "params",
    [{"temperature": 0, "max_new_tokens": 12}, {"temperature": 0.8, "seed": 7, "max_new_tokens": 12}],
)
def test_quantized_outputs_do_not_depend_on_the_batch(tiny_model, method, params) -> None:
    if method != "int8" and load_gguf_kernels() is None:
        pytest.skip("GGUF CPU kernels cannot be built here")
    engine = make_engine(str(tiny_model), quantization=method, enable_deterministic_inference=True)
    try:
        assert engine.get_server_info()["quantization"] == method
        batch = _outputs(engine.generate(PROMPTS, params, return_logprob=True))
        alone = [_outputs([engine.generate(p, params, return_logprob=True)])[0] for p in PROMPTS]
        assert alone == batch
    finally:
        engine.shutdown()
