"""One live radixlm server (tiny random model) whose OpenAI and Anthropic endpoints the remote-API
backends (``OpenAI``, ``Anthropic``, ``LiteLLM``) are tested against."""

from __future__ import annotations

import pytest

from radixlm.runtime.server.launch import launch_server

MODEL = "tiny"


@pytest.fixture(scope="package")
def api_server(tiny_llama_dir):
    with launch_server(
        model=tiny_llama_dir,
        device="cpu",
        num_threads=1,
        kv_cache_gb=0.02,
        context_length=1024,
        served_model_name=MODEL,
    ) as handle:
        yield handle
