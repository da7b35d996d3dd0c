"""Server start: the HTTP process and the detokenizer never import torch for a GGUF model (importing it
costs seconds), and the detokenizer, started alongside the scheduler, waits for its tokenizer's path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers.model_helpers import save_tiny_gguf, save_tiny_model, tiny_llama_config

ROOT = Path(__file__).resolve().parents[3]

CHILD = """
import sys
from radixlm.runtime.detokenizer.manager import DetokenizerManager
from radixlm.runtime.detokenizer.process import run_detokenizer_process
from radixlm.runtime.server.http_server import _import_serving_modules
from radixlm.runtime.weights.tokenizer_files import served_tokenizer

_import_serving_modules()
tokenizer = served_tokenizer(sys.argv[1])
DetokenizerManager(tokenizer)
print(tokenizer.decode(tokenizer.encode("Hello world")))
print(sorted(m for m in ("torch", "transformers.models.auto") if m in sys.modules))
"""


def test_the_server_and_detokenizer_load_a_gguf_tokenizer_without_importing_torch(tmp_path) -> None:
    from transformers import AutoTokenizer

    from radixlm.runtime.weights.checkpoint import iter_safetensors
    from radixlm.runtime.weights.tokenizer_files import load_tokenizer, tokenizer_dir

    env = {**os.environ, "RADIXLM_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    os.environ["RADIXLM_CACHE"] = env["RADIXLM_CACHE"]
    try:
        config = tiny_llama_config()
        hf_dir = save_tiny_model(config, tmp_path / "hf", with_tokenizer=False)
        gguf_path = save_tiny_gguf(config, dict(iter_safetensors(hf_dir)), tmp_path / "m.gguf")
        directory = tokenizer_dir(str(gguf_path))
        load_tokenizer(directory)  # the scheduler's load: keeps the pickle the other processes read
    finally:
        del os.environ["RADIXLM_CACHE"]
    reference = AutoTokenizer.from_pretrained(directory)
    out = subprocess.run(
        [sys.executable, "-c", CHILD, directory], env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr
    text, modules = out.stdout.splitlines()[-2:]
    assert text == reference.decode(reference.encode("Hello world"))
    assert modules == "[]"
